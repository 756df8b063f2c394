"""The claims pytest plugin (in the manner of pytest-benchmark).

``@pytest.mark.claim("C02")`` names the registered claim a test reproduces; the ``claim`` fixture gives it a
``ClaimRecorder``; a test that asks for ``seed`` is parametrized over the seeds of ``--scale``. One
``ClaimsSession`` lives in ``config.stash``; at the end it prints verdicts, compares with a saved run
(``--claims-compare``, ``--claims-compare-fail``), saves a numbered run file and the results pages
(``--claims-save``) and fails the session on a NOT REPRODUCED claim under ``--claims-strict``.

A claim test stopped by a diverged run (``opsft.runs.DivergedRunError``: one it loaded, or a parent of one) is
skipped, naming the arm, seed and step, and records the divergence (``ClaimRecorder.diverged``): every rule that
misses that seed's measurements is UNDEFINED with that reason, and the claim is not ERROR.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ablations.claims import REFERENCE_SCALE, SCALE_NAMES, scale_profile, skip_reason
from opsft.claims.compare import parse_threshold
from opsft.claims.declared import DeclaredRuns, declared_arms
from opsft.claims.recorder import ClaimRecorder
from opsft.claims.registry import CLAIMS, get
from opsft.claims.session import PROPERTY, ClaimsSession, Options
from opsft.claims.storage import REFERENCE_SCALES, load_baseline
from opsft.numerics import digest_tag
from opsft.progress import progress_text
from opsft.provenance import cpu_model
from opsft.threads import pinned_threads

SESSION = pytest.StashKey[ClaimsSession]()
CALL_UNFINISHED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``claims`` option group."""
    group = parser.getgroup("claims", "paper claims (opsft.claims)")
    group.addoption("--scale", choices=SCALE_NAMES, default="smoke", help="size profile of claim tests (default smoke)")
    group.addoption("--claims-save", metavar="NAME", help="save the run as STORAGE/NNNN_NAME.json and write results pages")
    group.addoption("--claims-compare", metavar="NAME", nargs="?", const="",
                    help="compare with a saved run (number or name; the latest if omitted)")
    group.addoption("--claims-compare-fail", metavar="METRIC:TOL[%]", action="append", default=[],
                    type=parse_threshold, help="fail when a metric's mean moves by more than TOL either way")
    group.addoption("--claims-strict", action="store_true", help="fail the session on a NOT REPRODUCED claim")
    group.addoption("--claims-storage", metavar="DIR", default=None, type=Path,
                    help="run files (default .claims/SCALE)")
    group.addoption("--claims-results", metavar="DIR", default=None, type=Path,
                    help=f"where --claims-save writes the results pages (default results for {REFERENCE_SCALE!r}, "
                    "else results/SCALE)")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker and create the session object."""
    config.addinivalue_line("markers", "claim(id): reproduces the registered claim `id` (opsft.claims.registry)")
    if config.getoption("claims_compare_fail") and config.getoption("claims_compare") is None:
        raise pytest.UsageError("--claims-compare-fail needs --claims-compare [NAME]")
    scale = config.getoption("scale")
    storage = config.getoption("claims_storage") or Path(".claims") / scale
    results = config.getoption("claims_results") or (Path("results") if scale == REFERENCE_SCALE
                                                      else Path("results") / scale)
    compare = config.getoption("claims_compare")
    try:  # fail before anything trains when the baseline is missing or corrupt
        baseline, baseline_note = (None, "") if compare is None else load_baseline(storage, compare or None,
                                                                                  cpu_model(), digest_tag())
    except (FileNotFoundError, ValueError) as err:
        raise pytest.UsageError(f"--claims-compare: {err}") from None
    if not hasattr(config, "workerinput"):  # xdist workers save nothing
        refuse_dirty_reference(config.getoption("scale"), config.getoption("claims_save"))
    session = ClaimsSession(Options(
        scale=config.getoption("scale"), save=config.getoption("claims_save"), compare=compare, baseline=baseline,
        baseline_note=baseline_note,
        compare_fail=tuple(config.getoption("claims_compare_fail")), strict=config.getoption("claims_strict"),
        storage=storage, results=results))
    config.stash[SESSION] = session
    config.pluginmanager.register(_ReportCollector(session, config), "opsft-claims-collector")


def claims_storage(config: pytest.Config) -> Path:
    """The folder this session saves claims runs in (``--claims-storage``, default ``.claims/SCALE``)."""
    return config.stash[SESSION].options.storage


def refuse_dirty_reference(scale: str, save: str | None) -> None:
    """A UsageError when ``--claims-save`` would write a reference scale's results (``REFERENCE_SCALES``) from a
    tree with uncommitted changes to tracked files: the pages must name the one commit they come from."""
    if save is None or scale not in REFERENCE_SCALES:
        return
    from opsft.provenance import git_state

    commit, dirty = git_state()
    if dirty is not False:
        state = "uncommitted changes" if dirty else "no readable git state"
        raise pytest.UsageError(f"--claims-save {save} at reference scale {scale!r}: the checkout has {state} "
                                f"(commit {commit}); commit first, or save at a non-reference scale")


def claim_id(node: pytest.Item | pytest.Function) -> str | None:
    """The claim id a test's marker names (None without a marker); a UsageError for a bad marker."""
    marker = node.get_closest_marker("claim")
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.args[0] not in CLAIMS:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.claim needs one registered id, got {marker.args}; "
                                f"registered: {', '.join(CLAIMS)}")
    try:
        CLAIMS[marker.args[0]].check_keys()
    except ValueError as err:
        raise pytest.UsageError(f"{node.nodeid}: {err}") from None
    return marker.args[0]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize a claim test's ``seed`` over the seeds of the chosen scale."""
    if "seed" in metafunc.fixturenames and claim_id(metafunc.definition) is not None:
        seeds = scale_profile(metafunc.config.getoption("scale"))["seeds"]
        metafunc.parametrize("seed", seeds, ids=[f"seed{s}" for s in seeds])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Check every claim marker at collection, before anything trains."""
    for item in items:
        claim_id(item)


@pytest.fixture
def claim(request: pytest.FixtureRequest) -> Iterator[ClaimRecorder]:
    """The recorder of the claim named by the test's ``claim`` marker, at the session's scale. The test runs
    at the cached runs' fixed torch thread count (``opsft.threads``), so its evaluations give the same numbers
    on any machine and under any ``-n``."""
    cid = claim_id(request.node)
    if cid is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the claim fixture needs @pytest.mark.claim(ID)")
    name = request.config.stash[SESSION].options.scale
    scale = scale_profile(name)
    reason = skip_reason(cid, name, scale)
    if reason:
        pytest.skip(f"{cid}: {reason}")
    request.node.user_properties.append((PROPERTY, {"claim": cid, "kind": "started", "data": {}}))
    declared = DeclaredRuns(declared_arms(request.module, name, scale, request.getfixturevalue("seed"),
                                          test_params(request.node)))
    with pinned_threads():
        yield ClaimRecorder(get(cid), name, scale, request.node.user_properties, declared=declared)
    unloaded = declared.unloaded()
    if unloaded and not request.node.stash.get(CALL_UNFINISHED, False):
        pytest.fail(f"{cid}: declared arms {unloaded} were never loaded: {request.module.__name__}.arms() "
                    "declares runs the test does not use", pytrace=False)


def test_params(item: pytest.Item) -> dict:
    """A claim test's parameters other than ``seed`` (e.g. C19's ``method``): what its ``arms`` takes."""
    callspec = getattr(item, "callspec", None)
    return {k: v for k, v in (callspec.params if callspec else {}).items() if k != "seed"}


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """Skip a claim test that a diverged run stopped, its divergence recorded (``ClaimRecorder.diverged``)."""
    try:
        return (yield)
    except Exception as err:
        recorder = pyfuncitem.funcargs.get("claim")
        if not isinstance(recorder, ClaimRecorder):
            raise
        from opsft.runs import DivergedRunError

        if not isinstance(err, DivergedRunError):
            raise
        reason = recorder.diverged(err, pyfuncitem.funcargs["seed"])
        pytest.skip(f"{recorder.claim.id}: {reason}: the rules missing this seed's measurements are UNDEFINED")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Note on the item whether its call phase did not pass (failed, or skipped midway: the ``claim`` fixture's
    teardown then does not ask for every declared arm)."""
    report = yield
    if report.when == "call":
        item.stash[CALL_UNFINISHED] = not report.passed
    return report


class _ReportCollector:
    """Hook object bound to the session: takes what each test recorded from its call report (under
    pytest-xdist the controller sees every worker's reports, user_properties included), and prints the main
    job's progress: claim tests done and left, wall time per test so far, and the time left at that pace."""

    def __init__(self, session: ClaimsSession, config: pytest.Config):
        self.session, self.config = session, config
        self.total = self.done = 0
        self.start = time.monotonic()

    def runs_here(self, cid: str | None) -> bool:
        """Whether a test of claim ``cid`` runs at the session's scale (not skipped by ``skip_reason``)."""
        name = self.session.options.scale
        return cid is not None and skip_reason(cid, name, scale_profile(name)) is None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Count the claim tests selected to run at this scale (without xdist)."""
        self.total = sum(self.runs_here(claim_id(item)) for item in session.items)

    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        """Count the claim tests to run (under xdist every worker collects the same ids; a claim's id is read
        from its module's name, ``suite/test_c02_...``)."""
        self.total = sum(self.runs_here(claim_of_test_id(i)) for i in ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the rows and runs of a finished test call; a failed setup, call or teardown makes its claim
        ERROR; after a claim test's teardown, print the progress line."""
        if report.when == "call":
            self.session.add_properties(report.user_properties)
        if report.failed:
            self.session.mark_errors(report.user_properties)
        if report.when == "teardown" and any(name == PROPERTY for name, _ in report.user_properties):
            self.done += 1
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None and self.total:
                reporter.ensure_newline()
                reporter.write_line(progress_line(self.done, self.total, time.monotonic() - self.start))


def claim_of_test_id(node_id: str) -> str | None:
    """The claim a suite test's node id names by its module (``suite/test_c02_sign_beats_sft.py::...`` -> C02)."""
    match = re.search(r"(?:^|/)test_([cx]\d\d)_[^/]*\.py::", node_id)
    return match.group(1).upper() if match else None


def progress_line(done: int, total: int, elapsed: float) -> str:
    """``claims: D/T tests done, S s per test, about M min left`` (``opsft.progress.progress_text``)."""
    return f"claims: {progress_text(done, total, elapsed, 'test')}"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Evaluate, compare and save on the controller; fail the session on strict verdicts or broken thresholds."""
    if hasattr(session.config, "workerinput"):
        return
    claims = session.config.stash[SESSION]
    claims.finish()
    if claims.failures() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """Print verdicts, changes against the baseline and failures."""
    claims = config.stash.get(SESSION, None)
    if claims is None or not claims.results:
        return
    terminalreporter.section(f"claims (scale {claims.options.scale})")
    for line in claims.summary_lines():
        terminalreporter.write_line(line)
    for line in claims.failures():
        terminalreporter.write_line(f"FAILED claims: {line}", red=True)
