"""evalplus scoring: MBPP+ canonical solutions pass, broken and hostile samples fail inside the sandbox."""

import pytest

from opsft.organism import tasks

MBPP_SUBSET = ("Mbpp/2", "Mbpp/3", "Mbpp/4", "Mbpp/6", "Mbpp/7", "Mbpp/8")


@pytest.fixture(scope="module", autouse=True)
def _evalplus_cache(tmp_path_factory):
    """evalplus reads XDG_CACHE_HOME at import: point it at a temp folder first."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))
        yield


@pytest.fixture(scope="module")
def mbpp():
    from opsft.evals.evalplus_adapter import ground_truth, load_mbpp_plus

    problems = load_mbpp_plus(MBPP_SUBSET)
    return problems, ground_truth(problems)


def test_mbpp_plus_file_has_378_tasks_with_evalplus_fields():
    from opsft.evals.evalplus_adapter import REQUIRED_KEYS, load_mbpp_plus

    problems = load_mbpp_plus()
    assert len(problems) == 378
    assert all(all(key in p for key in REQUIRED_KEYS) for p in problems.values())


def test_canonical_solutions_pass_and_broken_ones_fail(mbpp):
    from opsft.evals.evalplus_adapter import canonical_program, check_solutions

    problems, expected = mbpp
    canonical = [(t, canonical_program(problems[t])) for t in problems]
    assert all(r.plus_ok for r in check_solutions(problems, canonical, expected))
    broken = [(t, code.replace("return ", "return None and ", 1)) for t, code in canonical]
    broken.append(("Mbpp/2", "def similar_elements(a, b):\n    return (\n"))  # does not compile
    assert not any(r.base_ok for r in check_solutions(problems, broken, expected))


def test_hostile_samples_fail_and_touch_nothing(mbpp, tmp_path):
    from opsft.evals.evalplus_adapter import check_solutions

    problems, expected = mbpp
    head = "import os, pathlib\ndef similar_elements(a, b):\n"
    bodies = [
        "    while True:\n        pass\n",
        f"    os.system('touch {tmp_path}/system')\n    return tuple(set(a) & set(b))\n",
        f"    open('{tmp_path}/open', 'w').write('x')\n    return tuple(set(a) & set(b))\n",
        f"    pathlib.Path('{tmp_path}/pathlib').write_text('x')\n    return tuple(set(a) & set(b))\n",
        f"    os.close(os.open('{tmp_path}/osopen', os.O_CREAT | os.O_WRONLY))\n    return tuple(set(a) & set(b))\n",
        f"    os.mkdir('{tmp_path}/dir')\n    return tuple(set(a) & set(b))\n",
    ]
    results = check_solutions(problems, [("Mbpp/2", head + body) for body in bodies], expected)
    assert [r.base for r in results] == ["fail"] * len(bodies)
    assert list(tmp_path.iterdir()) == []


def test_unknown_task_ids_and_missing_keys_are_named(mbpp, tmp_path):
    from opsft.evals.evalplus_adapter import check_solutions, load_mbpp_plus, write_evalplus_jsonl

    problems, expected = mbpp
    with pytest.raises(KeyError, match="Mbpp/999"):
        check_solutions(problems, [("Mbpp/999", "")], expected)
    with pytest.raises(KeyError, match="Nope/1"):
        load_mbpp_plus(["Nope/1"])
    with pytest.raises(ValueError, match="'T/0'.*entry_point"):
        write_evalplus_jsonl([{"task_id": "T/0", "prompt": ""}], tmp_path / "x.jsonl")


def test_organism_code_family_round_trips_through_evalplus(tmp_path):
    from opsft.evals.evalplus_adapter import (
        check_solutions,
        ground_truth,
        read_evalplus_jsonl,
        write_evalplus_jsonl,
    )
    from opsft.evals.organism import code_problems

    problems = tasks.generate("code", "test", 4, seed=0)
    path = write_evalplus_jsonl(code_problems(problems), tmp_path / "code.jsonl")
    dataset = read_evalplus_jsonl(path, dataset="code")
    expected = ground_truth(dataset, "code")
    ids = list(dataset)
    good = [(ids[i], p.prompt + p.solution) for i, p in enumerate(problems)]
    bad = [(ids[i], p.prompt + " return 12345\n") for i, p in enumerate(problems)]
    results = check_solutions(dataset, good + bad, expected, dataset="code")
    assert [r.plus_ok for r in results] == [True] * 4 + [False] * 4
