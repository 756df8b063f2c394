"""Math answer checking with math-verify (gold first) under a hard per-call timeout, and the sample metrics.

math-verify's own timeouts use ``signal.alarm``, which fails off the main thread, and a pathological answer
(``\\boxed{9^{9^{9^{9}}}}``) really hangs it. So checking has two paths:

* a fast path: when gold and the prediction's last ``\\boxed{}`` are both plain integers (what the organism
  writes), compare them as integers, in process;
* a general path: a persistent pool of worker processes runs ``verify(parse(gold), parse(pred))`` with
  math-verify's timeouts off; the parent waits at most ``timeout`` seconds per call, then kills the worker,
  counts the answer wrong and starts a fresh worker.

Metrics take a correctness matrix ``correct[i][j]`` (problem i, sample j; n problems, k samples each).
"""

from __future__ import annotations

import atexit
import json
import math
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import IO

DEFAULT_TIMEOUT_S = 5.0
_INTEGER = re.compile(r"[+-]?\d+")


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (braces matched), or None if there is none."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for pos in range(begin, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            if depth == 0:
                return text[begin:pos].strip()
            depth -= 1
    return None


def _fast_verdict(prediction: str, gold: str) -> bool | None:
    """Integer comparison when gold and the prediction's boxed answer are both plain integers, else None."""
    gold = gold.strip()
    boxed = extract_boxed(prediction)
    if boxed is None or not _INTEGER.fullmatch(gold) or not _INTEGER.fullmatch(boxed):
        return None
    return int(boxed) == int(gold)


def _gold_for_parse(gold: str) -> str:
    """Wrap a bare gold in ``$...$``: some golds (e.g. ``(x+1)^2``) parse to nothing otherwise."""
    return gold if "$" in gold or "\\boxed" in gold else f"${gold}$"


def _verify_pair(prediction: str, gold: str) -> bool:
    """``verify(parse(gold), parse(prediction))`` with math-verify's signal timeouts off (run in a worker)."""
    from math_verify import parse, verify

    try:
        gold_parsed = parse(_gold_for_parse(gold), parsing_timeout=None)
        return bool(verify(gold_parsed, parse(prediction, parsing_timeout=None), timeout_seconds=None))
    except Exception:
        return False


def _serve() -> None:
    """Worker loop: one JSON ``[prediction, gold]`` per stdin line, one JSON bool per stdout line."""
    import logging

    import math_verify  # noqa: F401  (loaded before "ready")

    logging.disable(logging.WARNING)
    out, sys.stdout = sys.stdout, sys.stderr  # stray prints must not corrupt the protocol
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        prediction, gold = json.loads(line)
        out.write(json.dumps(_verify_pair(prediction, gold)) + "\n")
        out.flush()


class _Worker:
    """One math-verify worker process (``python -m opsft.evals.math``), talking JSON lines over pipes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "opsft.evals.math"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        if self.stdout.readline().strip() != "ready":  # imports are paid here, not in a call's timeout
            raise RuntimeError("math-verify worker (python -m opsft.evals.math) failed to start")

    def send(self, prediction: str, gold: str) -> None:
        """Ask for one verdict."""
        self.stdin.write(json.dumps([prediction, gold]) + "\n")
        self.stdin.flush()

    def receive(self) -> bool:
        """Read the verdict of the last request (a dead worker reads as False)."""
        line = self.stdout.readline()
        return bool(line) and json.loads(line)

    def stop(self) -> None:
        """Kill the process (it may be stuck inside sympy) and reap it."""
        self.process.kill()
        self.process.wait()
        self.stdin.close()
        self.stdout.close()


class VerifierPool:
    """A persistent pool of math-verify workers; each call is bounded by its own timeout."""

    def __init__(self, workers: int = 2) -> None:
        self.size = workers
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()

    def check(self, pairs: Sequence[tuple[str, str]], timeout: float) -> list[bool]:
        """``verify(parse(gold), parse(pred))`` for each (pred, gold); a call over ``timeout`` s is False."""
        results = [False] * len(pairs)
        with self._lock:
            while len(self._workers) < min(self.size, len(pairs)):
                self._workers.append(_Worker())
            pending = list(enumerate(pairs))[::-1]
            busy: dict[IO[str], tuple[_Worker, int, float]] = {}
            idle = list(self._workers)
            while pending or busy:
                while pending and idle:
                    worker = idle.pop()
                    index, pair = pending.pop()
                    worker.send(*pair)
                    busy[worker.stdout] = (worker, index, time.monotonic() + timeout)
                next_deadline = min(deadline for _, _, deadline in busy.values())
                for stream in wait(list(busy), timeout=max(0.0, next_deadline - time.monotonic())):
                    worker, index, _ = busy.pop(stream)
                    results[index] = worker.receive()
                    idle.append(worker if worker.process.poll() is None else self._replace(worker))
                now = time.monotonic()
                for stream, (worker, _index, deadline) in list(busy.items()):
                    if deadline <= now:
                        del busy[stream]
                        idle.append(self._replace(worker))
        return results

    def _replace(self, worker: _Worker) -> _Worker:
        """Kill a stuck or dead worker and put a fresh one in its slot."""
        worker.stop()
        fresh = _Worker()
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        """Stop every worker."""
        with self._lock:
            for worker in self._workers:
                worker.stop()
            self._workers.clear()


_POOL = VerifierPool()
atexit.register(_POOL.close)


def are_correct(
    predictions: Sequence[str | None],
    golds: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT_S,
    require_boxed: bool = False,
) -> list[bool]:
    """Whether each prediction matches its gold: integer fast path, else math-verify in the pool (timeout -> False).

    A None prediction (no answer produced) is wrong; a None gold is the caller's bug and raises a ValueError
    naming ``golds`` and its index. With ``require_boxed`` a prediction without ``\\boxed{}`` is wrong at once
    (the organism's answer format), instead of letting math-verify pick an unanchored number out of it.
    """
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions but {len(golds)} golds")
    missing = [i for i, g in enumerate(golds) if g is None]
    if missing:
        raise ValueError(f"golds[{missing[0]}] is None: every prediction needs a gold answer to check")
    verdicts = [
        False if p is None or (require_boxed and extract_boxed(p) is None) else _fast_verdict(p, g)
        for p, g in zip(predictions, golds, strict=True)
    ]
    slow = [i for i, v in enumerate(verdicts) if v is None]
    if slow:
        checked = _POOL.check([(predictions[i], golds[i]) for i in slow], timeout)
        for i, ok in zip(slow, checked, strict=True):
            verdicts[i] = ok
    return [bool(v) for v in verdicts]


def is_correct(prediction: str | None, gold: str, timeout: float = DEFAULT_TIMEOUT_S,
               require_boxed: bool = False) -> bool:
    """Whether ``prediction`` states ``gold`` (math-verify, gold first); False when the check exceeds
    ``timeout`` or ``prediction`` is None; a None ``gold`` raises a ValueError naming ``gold``."""
    if gold is None:
        raise ValueError("gold is None: is_correct needs a gold answer to check the prediction against")
    return are_correct([prediction], [gold], timeout, require_boxed)[0]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct of n samples: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def avg_at_k(correct: Sequence[Sequence[bool]]) -> float:
    """avg@k: mean over problems of the mean accuracy over its k samples, (1/n) sum_i (1/k) sum_j correct[i][j]."""
    return sum(sum(row) / len(row) for row in correct) / len(correct)


def mean_pass_at_k(correct: Sequence[Sequence[bool]], k: int) -> float:
    """pass@k averaged over problems, each with the unbiased estimator on its own n samples."""
    return sum(pass_at_k(len(row), sum(row), k) for row in correct) / len(correct)


def maj_at_k(answers: Sequence[Sequence[str | None]], correct: Sequence[Sequence[bool]]) -> float:
    """maj@k: share of problems whose most frequent extracted answer (ties: first seen; None never wins) is correct."""
    wins = 0
    for row_answers, row_correct in zip(answers, correct, strict=True):
        votes = Counter(a for a in row_answers if a is not None)
        if votes:
            top = max(votes, key=lambda a: (votes[a], -row_answers.index(a)))
            wins += row_correct[row_answers.index(top)]
    return wins / len(correct)


def sample_accuracy_std(correct: Sequence[Sequence[bool]]) -> float:
    """Std over sample slots j of the accuracy acc_j = (1/n) sum_i correct[i][j] (population std; 0 when k = 1)."""
    k = len(correct[0])
    accs = [sum(row[j] for row in correct) / len(correct) for j in range(k)]
    mean = sum(accs) / k
    return math.sqrt(sum((a - mean) ** 2 for a in accs) / k)


def mean_ci95(values: Sequence[float]) -> float:
    """Half-width of a normal 95% interval of the mean: 1.96 * s / sqrt(n), s the sample std (0 when n < 2)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return 1.96 * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


@dataclass(frozen=True)
class MathScore:
    """The math metrics of n problems with k samples each; ``avg_ci`` is the 95% half-width of avg@k."""

    avg: float
    avg_ci: float
    pass_k: float
    maj: float
    std: float
    n: int
    k: int


def score_completions(
    completions: Sequence[Sequence[str]],
    golds: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT_S,
    require_boxed: bool = False,
    judge: Callable[[str, str], bool] | None = None,
) -> tuple[MathScore, list[list[bool]]]:
    """Check every completion (problem i, sample j) against gold i and summarise; also returns the matrix.
    ``judge(completion, gold)`` replaces math-verify (``are_correct``) where a task family has its own rule for
    an answer (the organism's ``tasks.answer_is_correct``)."""
    if len(completions) != len(golds) or not golds:
        raise ValueError(f"need one non-empty list of completions per gold: {len(completions)} vs {len(golds)}")
    k = len(completions[0])
    if any(len(row) != k for row in completions):
        raise ValueError("every problem needs the same number k of completions")
    pairs = [(c, g) for row, g in zip(completions, golds, strict=True) for c in row]
    flat = ([judge(c, g) for c, g in pairs] if judge is not None
            else are_correct([c for c, _ in pairs], [g for _, g in pairs], timeout, require_boxed))
    correct = [flat[i * k : (i + 1) * k] for i in range(len(golds))]
    answers = [[extract_boxed(c) for c in row] for row in completions]
    score = MathScore(
        avg=avg_at_k(correct),
        avg_ci=mean_ci95([sum(row) / k for row in correct]),
        pass_k=mean_pass_at_k(correct, k),
        maj=maj_at_k(answers, correct),
        std=sample_accuracy_std(correct),
        n=len(golds),
        k=k,
    )
    return score, correct


if __name__ == "__main__":
    _serve()
