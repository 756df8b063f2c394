"""The claims plugin end to end, through pytester: seeds from the scale, saved run files, results pages,
--claims-strict, --claims-compare(-fail), marker checks and xdist collection. Nothing here trains."""

import hashlib
import json

import pytest

from ablations.calibration import GRID, SCALES
from opsft.calibrate import method_config
from opsft.claims.evaluate import CURRENT_VERSION
from opsft.claims.recorder import ClaimRecorder
from opsft.claims.registry import get
from opsft.claims.session import PROPERTY

pytest_plugins = ["pytester"]

# C02 decided on recorded numbers, each an accuracy on 200 problems right on its first ones: OPSFT = SFT + OFFSET;
# GRPO = OPSFT (so the closeness rule holds); the base at 20, so that both arms moved (the v3 guards).
CLAIM_TEST = """
import pytest

from opsft.claims.scored import Accuracy

OFFSET = {offset}
PROBLEMS = 200

def arms(scale_name, scale, seed):
    return {{}}

def accuracy(points):
    right = round(points * PROBLEMS / 100)
    return Accuracy(100 * right / PROBLEMS, [100.0] * right + [0.0] * (PROBLEMS - right))

@pytest.mark.claim("C02")
def test_claim_sign_beats_sft(claim, seed):
    measured = claim.record("opsft", seed, in_domain=accuracy(40 + OFFSET + seed))
    claim.record("sft", seed, in_domain=accuracy(40 + seed))
    claim.record("grpo", seed, in_domain=accuracy(40 + OFFSET + seed))
    claim.record("base", seed, in_domain=accuracy(20))
    assert measured == {{"in_domain": 40.0 + OFFSET + seed}}
"""


@pytest.fixture(autouse=True)
def clean_checkout(monkeypatch):
    """The checkout as a clean one at a fixed commit, so that saving at a reference scale (``full``) is allowed
    whatever state the developer's tree is in."""
    monkeypatch.setattr("opsft.provenance.git_state", lambda: ("c0ffee", False))


@pytest.fixture
def suite(pytester):
    """A pytester folder with the plugin loaded and a C02 test whose offset the test chooses."""
    pytester.makeconftest('pytest_plugins = ["opsft.claims.plugin"]')

    def write(offset: float):
        pytester.makepyfile(test_c02=CLAIM_TEST.format(offset=offset))
        return pytester

    return write


def run(pytester, *args):
    return pytester.runpytest("-p", "no:cacheprovider", "--claims-storage", "store", "--claims-results", "res", *args)


def test_seeds_follow_the_scale(suite):
    pytester = suite(5)
    full = run(pytester, "--scale", "full", "-v")
    full.stdout.fnmatch_lines(["*test_claim_sign_beats_sft[[]seed0[]] PASSED*", "*[[]seed2[]] PASSED*"])
    full.assert_outcomes(passed=3)
    full.stdout.fnmatch_lines(["C02 sign_beats_sft: REPRODUCED (rules v2: REPRODUCED, v1: REPRODUCED)"])
    run(pytester, "--scale", "smoke").assert_outcomes(passed=1)


def test_save_writes_numbered_run_files_with_provenance_and_pages(suite):
    pytester = suite(5)
    assert run(pytester, "--scale", "full", "--claims-save", "base").ret == 0
    assert run(pytester, "--scale", "smoke", "--claims-save", "base").ret == 0
    store = pytester.path / "store"
    assert sorted(p.name for p in store.glob("*.json")) == ["0001_base.json", "0002_base.json"]
    saved = json.loads((store / "0001_base.json").read_text())
    assert saved["scale"] == "full" and saved["number"] == 1
    assert {"commit", "dirty", "torch", "machine", "utc"} <= saved["provenance"].keys()
    c02 = saved["claims"]["C02"]
    assert c02["verdict"] == "REPRODUCED" and c02["seeds"] == [0, 1, 2] and len(c02["rows"]) == 12
    page = (pytester.path / "res" / "claims" / "C02_sign_beats_sft.md").read_text()
    assert "INCONCLUSIVE" in page and "run `0002_base`" in page  # the newest (smoke, one seed) run
    assert "commit `c0ffee` (clean tree)" in page and "seeds: 0" in page and "arith test seed 1" in page
    readme = (pytester.path / "res" / "README.md").read_text()
    assert ("| C02 | [sign_beats_sft](claims/C02_sign_beats_sft.md) | OPSFT Fig 3, Table 1 | INCONCLUSIVE | "
            f"INCONCLUSIVE | INCONCLUSIVE (v{CURRENT_VERSION}) | smoke | 0002_base | c0ffee |") in readme
    assert "| C01 | direction_consistency | OPSFT Fig 2 | not run | | | | | |" in readme
    assert "the newest run saved in `store` that holds the claim" in readme


def test_a_reference_scale_summary_comes_from_one_run_and_a_dirty_tree_cannot_save_it(suite, monkeypatch):
    pytester = suite(5)
    assert run(pytester, "--scale", "full", "--claims-save", "base").ret == 0
    readme = (pytester.path / "res" / "README.md").read_text()
    assert "Every line comes from run `0001_base` at commit `c0ffee`" in readme
    monkeypatch.setattr("opsft.provenance.git_state", lambda: ("c0ffee", True))
    dirty = run(pytester, "--scale", "full", "--claims-save", "again")
    assert dirty.ret == pytest.ExitCode.USAGE_ERROR
    dirty.stderr.fnmatch_lines(["*--claims-save again at reference scale 'full': the checkout has uncommitted*"])
    assert run(pytester, "--scale", "smoke", "--claims-save", "quick").ret == 0  # other scales may save


def test_a_claim_whose_test_fails_is_error_not_its_older_verdict(suite):
    pytester = suite(5)
    assert run(pytester, "--scale", "smoke", "--claims-save", "good").ret == 0
    pytester.makepyfile(test_c02=CLAIM_TEST.format(offset=5) + "    raise RuntimeError('training diverged')\n")
    failed = run(pytester, "--scale", "smoke", "--claims-save", "bad")
    failed.stdout.fnmatch_lines(["C02 sign_beats_sft: ERROR (rules v2: ERROR, v1: ERROR)"])
    readme = (pytester.path / "res" / "README.md").read_text()
    assert f"| ERROR | ERROR | ERROR (v{CURRENT_VERSION}) | smoke | 0002_bad |" in readme
    assert json.loads((pytester.path / "store" / "0001_good.json").read_text())["claims"]["C02"]["verdict"] != "ERROR"


def test_a_corrupt_run_file_is_named(suite):
    pytester = suite(5)
    run(pytester, "--scale", "smoke", "--claims-save", "base")
    (pytester.path / "store" / "0001_base.json").write_text("{not json")
    result = run(pytester, "--scale", "smoke", "--claims-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--claims-compare: claims run file store/0001_base.json: cannot be read as JSON*"])


def test_strict_fails_the_session_on_not_reproduced(suite):
    pytester = suite(-5)  # OPSFT below SFT on every seed
    lenient = run(pytester, "--scale", "full")
    assert lenient.ret == 0
    lenient.stdout.fnmatch_lines(["C02 sign_beats_sft: NOT REPRODUCED (rules v2: NOT REPRODUCED, v1: NOT REPRODUCED)"])
    strict = run(pytester, "--scale", "full", "--claims-strict")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    strict.stdout.fnmatch_lines(["FAILED claims: C02 sign_beats_sft: NOT REPRODUCED"])


def test_compare_fail_is_two_sided(suite):
    pytester = suite(5)
    run(pytester, "--scale", "full", "--claims-save", "base")
    for offset, code in ((5.5, 0), (9, 1), (1, 1)):
        result = run(suite(offset), "--scale", "full", "--claims-compare", "--claims-compare-fail", "in_domain:2")
        assert result.ret == code, (offset, result.stdout.str())
    result.stdout.fnmatch_lines(["FAILED claims: FAIL C02 opsft.in_domain: 46 -> 42 (-4, worse)"])
    missing = run(pytester, "--scale", "full", "--claims-compare", "nope")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--claims-compare: no saved claims run nope in store; saved: 0001_base*"])


def test_bad_marker_and_paper_scale(pytester):
    pytester.makeconftest('pytest_plugins = ["opsft.claims.plugin"]')
    pytester.makepyfile(test_bad='import pytest\n@pytest.mark.claim("C99")\ndef test_x(claim): pass\n')
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_x: @pytest.mark.claim needs one registered id, got ('C99',)*"])
    pytester.makepyfile(test_bad='import pytest\n@pytest.mark.claim("C03")\ndef test_x(claim, seed): pass\n')
    skipped = run(pytester, "--scale", "paper", "-rs")
    skipped.assert_outcomes(skipped=3)  # C03's arms need the organism: it skips at a recipe scale, saying why
    skipped.stdout.fnmatch_lines(["*C03: at scale 'paper' only C02, C16, X04 run*"])
    pytester.makepyfile(test_bad='import pytest\nfrom opsft.claims.arms import baseline\n'
                        'def arms(scale_name, scale, seed):\n    return {"sft": baseline("sft", scale, seed)}\n'
                        '@pytest.mark.claim("C02")\ndef test_x(claim, seed): pass\n')
    unset = run(pytester, "--scale", "paper")
    unset.assert_outcomes(errors=3)  # C02 trains the recipe's runs: without the model folders it says which
    unset.stdout.fnmatch_lines(["*uses ${OPSFT_MODELS}, which is not set*"])


def test_rows_from_xdist_workers_reach_the_controller(suite):
    pytester = suite(5)
    run(pytester, "--scale", "full", "-n", "2", "--claims-save", "x").assert_outcomes(passed=3)
    saved = json.loads((pytester.path / "store" / "0001_x.json").read_text())
    assert saved["claims"]["C02"]["seeds"] == [0, 1, 2] and saved["claims"]["C02"]["verdict"] == "REPRODUCED"


def test_recorder_notes_each_run_with_digest_and_wall_time(tmp_path):
    class Result:
        wall_time, folder = 1.5, tmp_path

        def weights_sha256(self):
            return "f" * 64

    config = method_config("sft", GRID[0], SCALES["smoke"], 0, "nano")
    props: list = []
    recorder = ClaimRecorder(get("C02"), "smoke", SCALES["smoke"], props, runner=lambda c: Result())
    assert recorder.run(config).wall_time == 1.5
    (name, entry), = props
    assert name == PROPERTY and entry["data"]["digest"] == config.digest() and entry["data"]["wall_time"] == 1.5
    with pytest.raises(ValueError, match="arm name 'a.b'"):
        recorder.record("a.b", 0, x=1)
    recorder.record("opsft", 0, x=1)  # no declared arms: a quantity over every run the test loaded
    assert props[-1][1]["data"]["weights"] == hashlib.sha256(("f" * 64).encode()).hexdigest()
    bare = ClaimRecorder(get("C02"), "smoke", SCALES["smoke"], props)
    bare.record("suite", 0, x=1)  # a test that loaded no run: its rows say so with an empty SHA-256
    assert props[-1][1]["data"]["weights"] == ""


def test_the_plugin_is_a_pytest11_entry_point_named_by_its_module():
    """Named as the root conftest names it, so pytest registers it once (entry point or conftest, not both)."""
    from importlib.metadata import entry_points

    assert [e.value for e in entry_points(group="pytest11") if e.name == "opsft.claims.plugin"] == ["opsft.claims.plugin"]


def test_a_suite_test_id_names_its_claim_by_its_module():
    from opsft.claims.plugin import claim_of_test_id

    assert claim_of_test_id("suite/test_c02_sign_beats_sft.py::test_claim_sign_beats_sft[seed0]") == "C02"
    assert claim_of_test_id("suite/test_x04_any_checkpoint_direction.py::test_x[seed1]") == "X04"
    assert claim_of_test_id("tests/test_plan.py::test_c02_like") is None


def test_progress_line_gives_the_time_left_at_the_pace_so_far():
    from opsft.claims.plugin import progress_line

    assert progress_line(3, 27, 360.0) == "claims: 3/27 tests done, 120 s per test, about 48 min left"


DECLARING_TEST = """
import pytest
from opsft.config import RunConfig

def arms(scale_name, scale, seed):
    return {{"declared": RunConfig(organism="nano", steps=1, seed=seed)}}

@pytest.mark.claim("C02")
def test_claim_sign_beats_sft(claim, seed):
    claim.record("sft", seed, in_domain=40.0)
    {body}
"""


def test_a_claim_test_loads_only_its_declared_runs_and_every_one_of_them(pytester):
    pytester.makeconftest('pytest_plugins = ["opsft.claims.plugin"]')
    pytester.makepyfile(test_c02=DECLARING_TEST.format(body="claim.run(RunConfig(organism='nano', steps=2))"))
    undeclared = run(pytester, "--scale", "smoke")
    undeclared.stdout.fnmatch_lines(["*UndeclaredRunError: claim C02: run * (sft, constraint none, 2 steps, seed 0) "
                                     "is not among the runs its test module's arms() declares*"])
    pytester.makepyfile(test_c02=DECLARING_TEST.format(body="pass"))
    unloaded = run(pytester, "--scale", "smoke")
    unloaded.stdout.fnmatch_lines(["*C02: declared arms ?'declared'? were never loaded*"])
    assert unloaded.ret == pytest.ExitCode.TESTS_FAILED


# C02 whose SFT arm is a declared run: the recorded numbers as in CLAIM_TEST, after loading that run
DIVERGING_TEST = CLAIM_TEST.replace('''def arms(scale_name, scale, seed):
    return {{}}''', '''from ablations.calibration import GRID, SCALES
from opsft.calibrate import method_config

def arms(scale_name, scale, seed):
    return {{"sft": method_config("sft", GRID[0], SCALES["smoke"], seed, "nano")}}''').replace(
    '''def test_claim_sign_beats_sft(claim, seed):
''', '''def test_claim_sign_beats_sft(claim, seed):
    claim.run(arms(claim.scale_name, claim.scale, seed)["sft"])
''')


def test_a_diverged_arm_skips_its_test_and_makes_the_rules_missing_its_seed_undefined(suite, monkeypatch, tmp_path):
    """The cached run graph as a stand-in whose seed-2 SFT run diverged at step 3: that seed's test is skipped,
    naming it, and every C02 rule (each reads an arm seed 2 never recorded) is UNDEFINED with that reason, in the
    session and in the saved run's pages."""
    from opsft.runs import RunResult, snapshot_name

    def cached(config, cache=None, progress=False):
        final = tmp_path / config.digest() / "snapshots" / snapshot_name(config.steps)
        final.mkdir(parents=True, exist_ok=True)
        (final / "model.safetensors").write_bytes(config.digest().encode())
        diverged = 3 if config.seed == 2 else None
        return RunResult(config, final.parent.parent, [], 1.0, tmp_path, diverged, "non-finite loss nan at step 3")

    monkeypatch.setattr("opsft.runs.run", cached)
    pytester = suite(5)
    pytester.makepyfile(test_c02=DIVERGING_TEST.format(offset=5))
    result = run(pytester, "--scale", "full", "-rs", "--claims-save", "div")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * C02: sft seed 2 diverged at step 3: the rules missing this seed's "
                                 "measurements are UNDEFINED"])
    result.stdout.fnmatch_lines(["C02 sign_beats_sft: UNDEFINED (rules v2: UNDEFINED, v1: UNDEFINED)",
                                 "    UNDEFINED       opsft.in_domain - sft.in_domain > * (sft seed 2 diverged at step 3)"])
    saved = json.loads((pytester.path / "store" / "0001_div.json").read_text())["claims"]["C02"]
    assert saved["verdict"] == "UNDEFINED" and saved["seeds"] == [0, 1, 2]
    assert {"arm": "sft", "seed": 2, "values": {}} == {k: v for k, v in saved["rows"][-1].items() if k != "diverged"}
    readme = (pytester.path / "res" / "README.md").read_text()
    assert f"| UNDEFINED | UNDEFINED | UNDEFINED (v{CURRENT_VERSION}) | full | 0001_div |" in readme
