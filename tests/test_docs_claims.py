"""The claims list ships with the project (``docs/CLAIMS.md``, issue "What a reader sees", item 1): the copy is
the file its header names, byte for byte, it lists the registry's claims, and every page that cites it links
it from where the page is written (nothing trains)."""

import hashlib
import re
from pathlib import Path

import pytest

from ablations.claims import REFERENCE_SCALE
from opsft.calibrate import render
from opsft.claims.evaluate import CURRENT_VERSION, ClaimResult
from opsft.claims.map_report import map_header
from opsft.claims.registry import CLAIMS
from opsft.claims.stats import Verdict
from opsft.claims.tables import (
    CLAIMS_DOC,
    REPO_ROOT,
    PageContext,
    claim_table,
    claims_doc_link,
    default_page,
    summary_table,
)

MARKER = b"<!-- verbatim copy of shared/CLAIMS.md below this line -->\n"


def header_and_body() -> tuple[str, bytes]:
    header, sep, body = CLAIMS_DOC.read_bytes().partition(MARKER)
    assert sep, f"{CLAIMS_DOC} has no marker line {MARKER!r} between its provenance and the copy"
    return header.decode("utf-8"), body


def test_the_shipped_claims_list_is_the_file_its_header_names_byte_for_byte():
    assert CLAIMS_DOC == REPO_ROOT / "docs" / "CLAIMS.md" and CLAIMS_DOC.is_file()
    header, body = header_and_body()
    assert "`shared/CLAIMS.md`" in header and "2026-12-07" in header and "verbatim" in header
    recorded = re.findall(r"SHA-256 of the original: `([0-9a-f]{64})`", header)
    assert len(recorded) == 1, "the header records one SHA-256"
    assert hashlib.sha256(body).hexdigest() == recorded[0]
    assert body.startswith(b"# The claims\n")


def test_the_shipped_claims_list_holds_the_registry_claims_in_order_with_their_slugs():
    _, body = header_and_body()
    rows = re.findall(r"^\| ([CX]\d\d) \| (\w+) \|", body.decode("utf-8"), flags=re.MULTILINE)
    assert [cid for cid, _ in rows] == list(CLAIMS)
    assert dict(rows) == {cid: claim.slug for cid, claim in CLAIMS.items()}


def links_to_claims_doc(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]*CLAIMS\.md)\)", text)


def assert_links_resolve(page: Path, text: str, count: int = 1) -> None:
    """``text``, written to ``page``, links the shipped claims list ``count`` times, each link resolving to it."""
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text, encoding="utf-8")
    links = links_to_claims_doc(page.read_text(encoding="utf-8"))
    assert len(links) == count, text
    for link in links:
        assert not Path(link).is_absolute() and "\\" not in link
        assert (page.parent / link).resolve() == CLAIMS_DOC.resolve() and (page.parent / link).is_file()


def c02_result() -> ClaimResult:
    """C02 with no rule results: enough for its page's header (its paper note cites CLAIMS.md)."""
    return ClaimResult(CLAIMS["C02"], {CURRENT_VERSION: (Verdict.INCONCLUSIVE, ())}, {})


def test_a_claim_page_links_the_claims_list_from_where_it_is_written(tmp_path):
    assert "CLAIMS.md" in CLAIMS["C02"].paper_note  # the note quotes the list: that mention becomes a link too
    for page in (tmp_path / "results" / "claims" / "C02_sign_beats_sft.md",
                 tmp_path / "res" / "ci" / "deeper" / "claims" / "C02_sign_beats_sft.md"):
        text = claim_table(c02_result(), PageContext("ci", "0001_ci", page=page))
        assert_links_resolve(page, text, count=2)
        assert "claim C02 of the claims list, [CLAIMS.md](" in text


@pytest.mark.parametrize("scale, link", [(REFERENCE_SCALE, "../../docs/CLAIMS.md"),
                                         ("ci", "../../../docs/CLAIMS.md")])
def test_without_a_page_the_link_is_from_where_the_plugin_writes_the_scale_by_default(scale, link):
    page = default_page(scale, CLAIMS["C02"])
    assert page.parent.parent == REPO_ROOT / "results" / ("" if scale == REFERENCE_SCALE else scale)
    assert claims_doc_link(page) == link
    assert f"[CLAIMS.md]({link})" in claim_table(c02_result(), PageContext(scale, "0001_x"))


def test_a_relative_page_path_is_taken_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    page = Path("results") / "map" / "README.md"
    assert_links_resolve(tmp_path / page, "\n".join(map_header(page)))


def test_the_map_the_summary_and_the_calibration_link_the_claims_list(tmp_path):
    assert_links_resolve(tmp_path / "map" / "README.md", "\n".join(map_header(tmp_path / "map" / "README.md")))
    assert_links_resolve(tmp_path / "ci" / "README.md", summary_table(CLAIMS.values(), {}, tmp_path / "ci" / "README.md"))
    assert links_to_claims_doc(summary_table(CLAIMS.values(), {})) == []  # no page, no link to get wrong
    assert_links_resolve(tmp_path / "organism.md", render({"scale": "smoke", "rows": []}, tmp_path / "organism.md"))
    assert links_to_claims_doc(render({"scale": "smoke", "rows": []})) == ["../docs/CLAIMS.md"]  # results/

