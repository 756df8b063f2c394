"""Task families of the organism: seeded generators of problems with verifiable answers.

In-domain (the post-training data, standing in for the papers' sets):
- ``arith``     three 1-2 digit operands, ``+``/``-``, non-negative steps (the organism's DeepMath);
- ``arith_alt`` the same domain, another distribution: one factor times a digit, then ``+``/``-``
                 (the organism's DAPO-Math);
- ``code``      a one-line spec of two or three operations -> a tiny Python function, checked by running
                 tests (the organism's Eurus).
Held-out abilities (in the base's pretraining mixture, never in post-training data):
- ``times``  the 1-digit times table;            ``neg``      a-b with a<b (negative results);
- ``format`` ``#`` asks for the answer alone;     ``long``     3-digit operands (longer than trained);
- ``compose`` four operands (an unseen composition length);
- ``mc``     multiple choice over whole solutions (scored by log-likelihood).

Every math solution is a chain of single operations ending in ``\\boxed{ANSWER}``. Two *styles* write the
same valid steps differently: the base's (``23+45=68;68-7=61;\\boxed{61}``) and the teacher's
(``45+23=68;68-7=61;\\boxed{61}``: the larger addend or factor first). SFT on teacher trajectories therefore
has to move the student to another distribution, as in the papers, but one written in the characters the
base knows: a teacher with new separators (``, so``) left the base at 4.6 nats a token on its solutions, as
far as from a random model, and SFT then broke the base's arithmetic before it could learn anything.

Splits are disjoint by construction: a problem belongs to ``test`` when a hash of its prompt falls in the
top 20%, so no test prompt is ever generated for ``train``.
"""

from __future__ import annotations

import ast
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# Bump when a generator changes the problems it writes for a seed: every model and run trained on the old
# problems then misses the cache (it is part of the organism digests).
TASKS_VERSION = 3

Style = Literal["base", "teacher"]
Split = Literal["train", "test"]
TEST_SHARE = 0.2


@dataclass(frozen=True)
class Problem:
    """One problem: the prompt the model sees, its gold answer and a reference completion.

    ``solution`` is written in the style it was generated for; ``tests`` are (input, output) pairs for
    ``code``; ``choices``/``label`` are set for multiple choice.
    """

    prompt: str
    answer: str
    family: str
    solution: str
    tests: tuple[tuple[int, int], ...] = ()
    choices: tuple[str, ...] = ()
    label: int = -1


def split_of(prompt: str) -> Split:
    """``test`` for the prompts whose SHA-1 falls in the top TEST_SHARE of the hash range, else ``train``."""
    h = int.from_bytes(hashlib.sha1(prompt.encode()).digest()[:4], "big") / 2**32
    return "test" if h >= 1 - TEST_SHARE else "train"


# --- math: chains of single operations -------------------------------------------------------------


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _steps(operands: list[int], ops: list[str], style: Style) -> str:
    """Left-to-right evaluation written one operation per step, then the boxed result."""
    acc, parts = operands[0], []
    for op, b in zip(ops, operands[1:], strict=True):
        res = _apply(acc, op, b)
        x, y = (max(acc, b), min(acc, b)) if (style == "teacher" and op in "+*") else (acc, b)
        parts.append(f"{x}{op}{y}={res}")
        acc = res
    return ";".join(parts) + f";\\boxed{{{acc}}}"


def _chain_problem(family: str, operands: list[int], ops: list[str], style: Style, prefix: str = "") -> Problem:
    prompt = prefix + "".join(f"{a}{op}" for a, op in zip(operands, ops, strict=False)) + f"{operands[-1]}="
    acc = operands[0]
    for op, b in zip(ops, operands[1:], strict=True):
        acc = _apply(acc, op, b)
    solution = f"\\boxed{{{acc}}}" if prefix == "#" else _steps(operands, ops, style)
    return Problem(prompt=prompt, answer=str(acc), family=family, solution=solution)


def _nonneg_chain(rng: random.Random, n: int, lo: int, hi: int) -> tuple[list[int], list[str]]:
    """Operands in [lo, hi] and +/- ops such that every intermediate result stays >= 0."""
    operands, ops = [rng.randint(lo, hi)], []
    acc = operands[0]
    for _ in range(n - 1):
        op = rng.choice("+-")
        b = rng.randint(lo, hi) if op == "+" else rng.randint(lo, min(hi, acc)) if acc >= lo else None
        if b is None:
            op, b = "+", rng.randint(lo, hi)
        operands.append(b)
        ops.append(op)
        acc = _apply(acc, op, b)
    return operands, ops


def _arith(rng: random.Random, style: Style) -> Problem:
    return _chain_problem("arith", *_nonneg_chain(rng, 3, 0, 99), style)


def _arith_alt(rng: random.Random, style: Style) -> Problem:
    a, d = rng.randint(2, 30), rng.randint(2, 9)
    op = rng.choice("+-")
    c = rng.randint(0, 99) if op == "+" else rng.randint(0, a * d)
    return _chain_problem("arith_alt", [a, d, c], ["*", op], style)


def _long(rng: random.Random, style: Style) -> Problem:
    return _chain_problem("long", *_nonneg_chain(rng, 3, 100, 999), style)


def _compose(rng: random.Random, style: Style) -> Problem:
    return _chain_problem("compose", *_nonneg_chain(rng, 4, 0, 99), style)


def _times(rng: random.Random, style: Style) -> Problem:
    return _chain_problem("times", [rng.randint(1, 9), rng.randint(1, 9)], ["*"], style)


def _neg(rng: random.Random, style: Style) -> Problem:
    a = rng.randint(0, 98)
    return _chain_problem("neg", [a, rng.randint(a + 1, 99)], ["-"], style)


def _format(rng: random.Random, style: Style) -> Problem:
    return _chain_problem("format", *_nonneg_chain(rng, 2, 0, 99), style, prefix="#")


def _mc(rng: random.Random, style: Style) -> Problem:
    base = _chain_problem("mc", *_nonneg_chain(rng, 2, 0, 99), style)
    gold = int(base.answer)
    wrong = rng.sample([d for d in (-10, -2, -1, 1, 2, 10) if gold + d >= 0], 2)
    options = [gold] + [gold + d for d in wrong]
    rng.shuffle(options)
    choices = tuple(_replace_result(base.solution, gold, o) for o in options)
    return Problem(prompt=base.prompt, answer=base.answer, family="mc", solution=base.solution,
                   choices=choices, label=options.index(gold))


def _replace_result(solution: str, gold: int, other: int) -> str:
    """The solution with its final result (last step and box) replaced by ``other``."""
    head, _, _ = solution.rpartition(f"={gold}")
    tail = solution[len(head) + len(f"={gold}"):]
    return head + f"={other}" + tail.replace(f"{{{gold}}}", f"{{{other}}}")


# --- code: one-line specs of small integer functions -----------------------------------------------

_CODE_OPS: tuple[tuple[str, Callable[[str, int], str], Callable[[int, int], int], tuple[int, int]], ...] = (
    ("add {n}", lambda e, n: f"{e}+{n}", lambda x, n: x + n, (1, 9)),
    ("subtract {n}", lambda e, n: f"{e}-{n}", lambda x, n: x - n, (1, 9)),
    ("times {n}", lambda e, n: f"({e})*{n}", lambda x, n: x * n, (2, 5)),
    ("mod {n}", lambda e, n: f"({e})%{n}", lambda x, n: x % n, (2, 9)),
    ("negate", lambda e, n: f"-({e})", lambda x, n: -x, (0, 0)),
    ("square", lambda e, n: f"({e})**2", lambda x, n: x * x, (0, 0)),
)
# The teacher writes the constant first where the operation commutes (``3+x``, ``2*(x+1)``), as it writes the
# larger operand first in math.
_TEACHER_BUILDS: dict[str, Callable[[str, int], str]] = {
    "add {n}": lambda e, n: f"{n}+{e}",
    "times {n}": lambda e, n: f"{n}*({e})",
}
CODE_TEST_INPUTS = (0, 1, 2, 3, 5, 7, -4, 10)


def _simplify(expr: str) -> str:
    """Drop parentheses around a bare name: ``(x)*2`` -> ``x*2``."""
    return expr.replace("(x)", "x")


def _code(rng: random.Random, style: Style) -> Problem:
    steps = [rng.choice(_CODE_OPS) for _ in range(rng.randint(2, 3))]
    consts = [rng.randint(*rng_range) for *_, rng_range in steps]
    spec = " then ".join(s[0].format(n=n) for s, n in zip(steps, consts, strict=True))
    prompt = f'def f(x):\n "{spec}"\n'
    expr = "x"
    for (name, build, _, _), n in zip(steps, consts, strict=True):
        expr = (_TEACHER_BUILDS.get(name, build) if style == "teacher" else build)(expr, n)
    solution = f" return {_simplify(expr)}\n"

    def reference(x: int) -> int:
        for (_, _, fn, _), n in zip(steps, consts, strict=True):
            x = fn(x, n)
        return x

    tests = tuple((x, reference(x)) for x in CODE_TEST_INPUTS)
    return Problem(prompt=prompt, answer=repr(tests), family="code", solution=solution, tests=tests)


GENERATORS: dict[str, Callable[[random.Random, Style], Problem]] = {
    "arith": _arith,
    "arith_alt": _arith_alt,
    "code": _code,
    "times": _times,
    "neg": _neg,
    "format": _format,
    "long": _long,
    "compose": _compose,
    "mc": _mc,
}
FAMILIES: tuple[str, ...] = tuple(GENERATORS)
IN_DOMAIN: tuple[str, ...] = ("arith", "arith_alt", "code")
HELD_OUT: tuple[str, ...] = ("times", "neg", "format", "long", "compose", "mc")


def generate(family: str, split: Split, n: int, seed: int, style: Style = "base", at_most: bool = False) -> list[Problem]:
    """``n`` distinct problems of ``family`` from ``split``, deterministic in ``seed``.

    ``test`` and ``train`` never share a prompt (see :func:`split_of`). When the family's space holds fewer
    than ``n`` distinct problems of that split (the times table, the code specs), ``at_most=True`` returns
    the ones found; otherwise that raises ValueError.
    """
    if family not in GENERATORS:
        raise KeyError(f"unknown task family {family!r}; known: {', '.join(FAMILIES)}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"{family}:{seed}")
    seen: set[str] = set()
    out: list[Problem] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            if at_most:
                return out
            raise ValueError(f"family {family!r} has fewer than {n} distinct {split} problems")
        p = GENERATORS[family](rng, style)
        if p.prompt in seen or split_of(p.prompt) != split:
            continue
        seen.add(p.prompt)
        out.append(p)
    return out


# --- verification -----------------------------------------------------------------------------------


def boxed_answer(completion: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in a completion (balanced braces), or None."""
    start = completion.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(completion)):
        depth += {"{": 1, "}": -1}.get(completion[j], 0)
        if depth == 0:
            return completion[i:j].strip()
    return None


_SAFE_NODES = (
    ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.Expr, ast.Name,
    ast.Load, ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Mod,
    ast.Pow, ast.FloorDiv, ast.USub, ast.UAdd,
)


def run_code(prompt: str, completion: str, inputs: tuple[int, ...]) -> list[int] | None:
    """Outputs of the function ``prompt + completion`` on ``inputs``, or None when it does not parse, uses
    anything beyond integer arithmetic on local names (the organism's whole code language), or fails.

    The whitelist makes in-process execution safe for rewards; reported code scores go through evalplus.
    """
    source = prompt.split("\n", 1)[0] + "\n" + completion.rstrip() + "\n"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if not all(isinstance(node, _SAFE_NODES) for node in ast.walk(tree)):
        return None
    if any(isinstance(n, ast.Constant) and not isinstance(n.value, int) for n in ast.walk(tree)):
        return None
    if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and not _is_const(n.right, 2)
           for n in ast.walk(tree)):
        return None  # only squaring: x**x**x would hang the reward
    namespace: dict = {}
    try:
        exec(compile(tree, "<organism>", "exec"), {"__builtins__": {}}, namespace)  # noqa: S102 - whitelisted AST
        fn = namespace["f"]
        return [int(fn(x)) for x in inputs]
    except Exception:  # noqa: BLE001 - any runtime failure of generated code scores as wrong
        return None


def _is_const(node: ast.AST, value: int) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def answer_is_correct(completion: str, gold: str) -> bool:
    """Whether a completion's last ``\\boxed{}`` holds exactly the gold string (surrounding spaces aside): the
    organism's one rule for an answer, in its rewards and in every score of its math families (the lm-eval
    tasks' ``process_results`` call it too, ``evals/lm_eval_tasks/utils.py``).

    Every gold is canonical (``str(int)``: no sign on a positive, no leading zero, no ``-0``) and every solution
    the organism learns from writes it so; another spelling of the number (``03``, ``+3``, ``3.0``, ``-0``) or an
    expression for it (``1+2``, ``x=3``) is an answer the organism's language does not write, and counts as
    wrong, as the ``format`` family's exact match always did. (math-verify would accept them; it stays the
    verifier of the real benchmarks, whose golds are free-form LaTeX.)"""
    return boxed_answer(completion) == gold


def is_correct(problem: Problem, completion: str) -> bool:
    """Whether a completion solves the problem: its boxed answer is the gold answer (``answer_is_correct``,
    math families), or the function passes every test (``code``)."""
    if problem.family == "code":
        outputs = run_code(problem.prompt, completion, tuple(x for x, _ in problem.tests))
        return outputs == [y for _, y in problem.tests]
    return answer_is_correct(completion, problem.answer)
