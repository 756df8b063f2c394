"""The organisms' recipes: sizes, pretraining budgets and mixtures of each named organism (``ORGANISMS``).

Pure configuration, below ``opsft.config`` (a run's digest includes its organism's recipe digest) and above
nothing but the digest and the task generators' version; ``opsft.pretraining`` trains what it describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opsft.digest import OMIT_DEFAULT, Digestible
from opsft.organism import tasks

# The base's pretraining mixture (family -> share). In-domain families are learned only part-way; the
# held-out abilities are what post-training can make it forget. (A base that wrote 60% of its in-domain answers
# bare, to hold a worse mode that RL could switch off, learnt the worked steps too poorly: 3% of its sampled
# step-by-step solutions were right after 1000 steps.)
BASE_MIXTURE = (("arith", 0.45), ("arith_alt", 0.15), ("code", 0.05), ("times", 0.10), ("neg", 0.10), ("format", 0.15))
# The teacher sees the in-domain families in its own style, more of them, for longer.
TEACHER_MIXTURE = (("arith", 0.45), ("arith_alt", 0.25), ("code", 0.30))


@dataclass(frozen=True)
class ModelRecipe(Digestible):
    """How one of the organism's two models is pretrained; its digest keys the model's own cache entry, so
    changing the base's recipe never retrains the teacher (and the reverse)."""

    size: str
    mixture: tuple
    style: str
    steps: int
    batch_size: int
    lr: float
    examples: int
    seed: int
    # Batches run in this many length-sorted, trimmed groups (opsft.objectives.batch_logprobs): the same loss, other
    # float rounding, a third fewer tokens computed on the mixtures' batches. 1 (one padded forward) is left out
    # of the digest, so the recipes that keep it keep their models.
    length_chunks: int = field(default=1, metadata={OMIT_DEFAULT: True})

    def digest_context(self) -> dict:
        """The task generators' version: a model trained on other problems is another model."""
        return {"tasks": tasks.TASKS_VERSION}


@dataclass(frozen=True)
class OrganismSpec(Digestible):
    """Sizes and training budgets of one organism (student base + teacher)."""

    student: str = "micro"
    teacher: str = "mini"
    # 600 steps leave the micro base at 27% greedy on 200 held-out arith problems (a probe at 800 steps: 49%;
    # 35% when trained in 4 length chunks): inside the 10-60% band where GRPO's groups see both outcomes
    base_steps: int = 600
    teacher_steps: int = 1500
    batch_size: int = 64
    pretrain_lr: float = 2e-3
    pretrain_examples: int = 30_000
    seed: int = 0
    base_mixture: tuple = BASE_MIXTURE
    teacher_mixture: tuple = TEACHER_MIXTURE
    eval_problems: int = 200
    pretrain_length_chunks: int = field(default=1, metadata={OMIT_DEFAULT: True})  # ModelRecipe.length_chunks

    def digest_context(self) -> dict:
        """The task generators' version: an organism scored on other problems is another organism."""
        return {"tasks": tasks.TASKS_VERSION}

    def recipe(self, role: str) -> ModelRecipe:
        """The pretraining recipe of ``role`` ("base": the student size on the base mixture in base style;
        "teacher": the teacher size on the teacher mixture in teacher style, with another seed)."""
        if role not in ("base", "teacher"):
            raise KeyError(f"unknown organism role {role!r}; known: base, teacher")
        base = role == "base"
        return ModelRecipe(size=self.student if base else self.teacher,
                           mixture=self.base_mixture if base else self.teacher_mixture, style=role,
                           steps=self.base_steps if base else self.teacher_steps, batch_size=self.batch_size,
                           lr=self.pretrain_lr, examples=self.pretrain_examples,
                           seed=self.seed + (0 if base else 1), length_chunks=self.pretrain_length_chunks)


ORGANISMS: dict[str, OrganismSpec] = {
    "nano": OrganismSpec(student="nano", teacher="nano", base_steps=60, teacher_steps=60, pretrain_examples=2000,
                         eval_problems=32),
    # Teacher in 4 length chunks, 1600 steps: the cold build in 599 s with the teacher at 96.5% (results/perf.md,
    # section organism). One padded forward and 1500 steps: 711 s and 88.5%; 4 chunks and 1500 steps: 81%;
    # 4 chunks and 1800 steps: 96% in 655 s (probes at d97ae45-ed7d5d1 on 2 cores). Its base scores 35%.
    "micro": OrganismSpec(pretrain_length_chunks=4, teacher_steps=1600),
    "small": OrganismSpec(student="small", base_steps=900),
    # Candidates for the reference scale (issue 34; results/organism.md, "Candidates for the reference scale"):
    # micro's teacher recipe (so micro's cached teacher) with a base whose sampled arith pass rate sits nearer 50%,
    # where GRPO's per-group signal p(1-p) peaks (micro's base samples 10% right: 43% of its groups of 8 carry no
    # gradient). A later base checkpoint (900 / 1200 pretraining steps), and a base of the `mini` size (1.2M,
    # between micro and small) at micro's 600 steps.
    "micro_b900": OrganismSpec(pretrain_length_chunks=4, teacher_steps=1600, base_steps=900),
    "micro_b1200": OrganismSpec(pretrain_length_chunks=4, teacher_steps=1600, base_steps=1200),
    "mini_b600": OrganismSpec(student="mini", pretrain_length_chunks=4, teacher_steps=1600),
}
