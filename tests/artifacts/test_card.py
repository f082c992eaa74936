"""The model card: Hub front matter huggingface_hub accepts, and the report's real figures."""
from __future__ import annotations

import json
import re

import pytest
from huggingface_hub import ModelCard

from rlparity.artifacts.card import render_card
from rlparity.artifacts.tables import fmt
from tests.artifacts.conftest import bench_section, rollout_section


def _with(report: dict, **sections) -> dict:
    data = json.loads(json.dumps(report))
    data["extra"].update(sections)
    return data


def _section(card: str, heading: str) -> str:
    """The text under a markdown heading, up to the next heading of the same or higher level."""
    level = heading.split(" ")[0]
    start = card.index(heading + "\n")
    stop = re.compile(rf"^#{{1,{len(level)}}} ", re.M).search(card, start + len(heading) + 1)
    return card[start:stop.start() if stop else len(card)]


def _rows(table_text: str) -> list[list[str]]:
    """Cells of every body row of the markdown tables in ``table_text``."""
    separator = re.compile(r"^\|[-:|]+\|$")
    lines = table_text.splitlines() + [""]
    return [[c.strip().strip("`") for c in line.strip("|").split(" | ")]
            for line, after in zip(lines, lines[1:])
            if line.startswith("| ") and not separator.match(after)]  # not the header row


def test_front_matter_is_what_the_hub_reads(walker_report):
    card = ModelCard(render_card(walker_report, "TinyWalker-1000.onnx", base_model="Unity/TinyWalker"))
    assert card.data.library_name == "onnx"
    assert card.data.pipeline_tag == "reinforcement-learning"
    assert {"reinforcement-learning", "onnx", "rlparity", "mlagents"} <= set(card.data.tags)
    assert card.data.base_model == "Unity/TinyWalker"
    assert card.data.eval_results is None  # no rollout measured: no model-index
    assert "model-index" not in card.content.split("---")[1]


def test_model_index_carries_the_rollout_returns(walker_report):
    report = _with(walker_report, rollout=rollout_section())
    card = ModelCard(render_card(report, "TinyWalker-1000.onnx"))
    assert "seals/CartPole-v0" in card.data.tags
    (result,) = card.data.eval_results
    headline = report["extra"]["rollout"]["results"][1]  # ort-cpu: the export the card describes
    assert result.metric_value == f"{headline['mean_return']:.2f} +/- {headline['std_return']:.2f}"
    assert (result.task_type, result.dataset_type, result.metric_type) == (
        "reinforcement-learning", "seals/CartPole-v0", "mean_reward")
    assert card.data.model_name == "TinyWalker-1000"
    # the model-index parses back through huggingface_hub (ModelCard.load reads files the same way)
    assert ModelCard(str(card)).data.eval_results[0].metric_value == result.metric_value


def test_validation_tables_show_the_reports_figures(walker_report):
    card = render_card(walker_report, "TinyWalker-1000.onnx")
    checked = 0
    for c in walker_report["comparisons"]:
        section = _section(card, f"### {c['candidate']} vs {c['reference']}: {'pass' if c['passed'] else 'FAIL'}")
        rows = {r[0]: r for r in _rows(section)}
        for o in c["outputs"]:
            row, m = rows[o["output"]], o["metrics"]
            assert row[1] == o["rule"] and row[8] == ("pass" if o["passed"] else "FAIL")
            if "max_abs" in m:
                assert row[2] == f"{100 * m['bit_match_rate']:.2f}%"
                assert float(row[3]) == pytest.approx(m["max_abs"], rel=1e-3, abs=0)
                assert row[3] == fmt(m["max_abs"]) and row[5] == fmt(m["cosine"], 7)
                assert f"{m['elements']:,} elements" in row[7]
                checked += 1
    assert checked == 3  # one element-wise output in each of the three comparisons
    assert walker_report["inputs"]["digest"] in card
    assert "**Verdict: PASS.**" in card


def test_timing_and_graph_contents_come_from_the_report(walker_report):
    card = render_card(walker_report, "TinyWalker-1000.onnx")
    rows = {r[0]: r for r in _rows(_section(card, "## Runtimes and timing"))}
    for r in walker_report["runtimes"]:
        assert rows[r["name"]][3:6] == [fmt(r["timing"][k]) for k in ("first_call_ms", "median_ms", "min_ms")]
    contents = dict(r[:2] for r in _rows(_section(card, "## What is inside the graph")))
    assert contents == {k: v.replace("*", "\\*") for k, v in walker_report["graph_contents"].items()}
    io_rows = _rows(_section(card, "## Inputs and outputs"))
    assert [r[1] for r in io_rows] == [t["name"] for t in walker_report["io_spec"]["inputs"]
                                       + walker_report["io_spec"]["outputs"]]
    assert walker_report["export"]["sha256"] in card and walker_report["source"]["sha256"] in card
    assert "identical, node for node, to the official export" in card


def test_optional_sections_appear_only_when_measured(walker_report):
    plain = render_card(walker_report, "TinyWalker-1000.onnx")
    for heading in ("## Latency benchmark", "## Closed-loop rollouts", "## Precision"):
        assert heading not in plain
    precision = [{"dtype": "float16", "device": "cpu", "comparisons": walker_report["comparisons"][:1]}]
    full = render_card(_with(walker_report, bench=bench_section(), rollout=rollout_section(identical=False),
                             precision=precision), "TinyWalker-1000.onnx")

    bench = _section(full, "## Latency benchmark")
    rows = _rows(bench)
    for row, r in zip(rows, bench_section()["results"]):
        assert row[:4] == [r["runtime"], r["device"], r["dtype"], str(r["batch"])]
        assert row[7] == fmt(r["p50_ms"]) and row[10] == fmt(r["p99_ms"])
        assert row[12] == f"{r['decisions_per_s']:,.0f}"
    assert "![latency against batch size per runtime](bench.png)" in bench
    assert fmt(0.000417) in bench and "200 timed calls" in bench

    rollout = _section(full, "## Closed-loop rollouts")
    for row, r in zip(_rows(rollout), rollout_section()["results"]):
        assert row[:3] == [r["runtime"], fmt(r["mean_return"]), fmt(r["std_return"])]
        assert row[6] == r["fingerprint"]
    assert "first diverge in episode 1, step 42, between torch-cpu and ort-cpu (max_abs 2.500e-07)" in rollout

    precision_text = _section(full, "## Precision")
    assert "### float16 on cpu: ort-cpu vs torch-cpu: pass" in precision_text
    elementwise = next(o for o in walker_report["comparisons"][0]["outputs"] if o["rule"] == "elementwise")
    assert fmt(elementwise["metrics"]["max_abs"]) in precision_text


def test_a_mismatch_is_the_first_thing_the_card_says(walker_report):
    report = json.loads(json.dumps(walker_report))
    report["comparisons"][1]["passed"] = False
    report["verdict"] = "mismatch"
    card = render_card(report, "TinyWalker-1000.onnx")
    assert "**Verdict: MISMATCH** in ort-ref vs torch-cpu." in card.split("\n## ")[0]
    assert "### ort-ref vs torch-cpu: FAIL" in card


def test_text_from_the_report_cannot_break_a_table(walker_report):
    report = json.loads(json.dumps(walker_report))
    report["graph_contents"] = {"odd | part": "inside | with a pipe\nand a newline"}
    card = render_card(report, "TinyWalker-1000.onnx")
    assert "| odd \\| part | inside \\| with a pipe and a newline |" in card


def test_a_rollout_of_one_runtime_claims_no_agreement(walker_report):
    section = rollout_section()
    section["results"], section["identical_actions"] = section["results"][1:], False
    rollout = _section(render_card(_with(walker_report, rollout=section), "TinyWalker-1000.onnx"), "## Closed-loop rollouts")
    assert "Only ort-cpu played: no other runtime to compare its actions with." in rollout
    assert "identical" not in rollout
