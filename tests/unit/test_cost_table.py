"""The README's and docs/aws.md's cost tables are what bench/cost.py computes (docs/aws.md, "What it costs")."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cost import BACKENDS, PROFILES, monthly_cost, table

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc", ["README.md", "docs/aws.md"])
def test_the_cost_table_is_current(doc: str) -> None:
    assert table() in (ROOT / doc).read_text(encoding="utf-8"), f"run `python bench/cost.py` and update {doc}"


def test_the_readme_shows_the_costs_before_the_deploy_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.index(table()) < readme.index("npx cdk deploy")


def test_classic_idles_at_its_floor_and_the_replica_has_none() -> None:
    idle = PROFILES[0].__class__("idle", 0, 0, 0, 0, 0, 0)
    assert monthly_cost(idle, "opensearch-classic")["search"] == pytest.approx(175.2)
    assert monthly_cost(idle, "opensearch-nextgen")["search"] == 0
    assert monthly_cost(idle, "replica")["search"] < 0.01
    for profile in PROFILES:
        totals = [monthly_cost(profile, b)["total"] for b in BACKENDS]
        assert totals[2] < totals[1] < totals[0]
    with pytest.raises(ValueError):
        monthly_cost(PROFILES[0], "elastic")
