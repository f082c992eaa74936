"""`rlparity diff`: contracts, numbers and the first divergence, on real exports.

Faults are planted in copies of real ML-Agents exports (the bundled samples and the
shared fixtures), each as a user's broken candidate would carry it.
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from rlparity.validators.diff import DiffOptions, diff, io_spec_from_onnx
from tests.conftest import DATA, TINYBRANCHES, TINYWALKER, fixture_path

WALKER = TINYWALKER / "TinyWalker-1000.onnx"
BRANCHES = TINYBRANCHES / "TinyBranches-5000.onnx"
BODY = "/network_body/_body_endoder/seq_layers"


def plant(tmp_path: Path, source: Path, *changes, name: str = "candidate.onnx") -> Path:
    """A copy of ``source`` with ``changes`` (functions of the ModelProto) applied."""
    model = onnx.load(str(source))
    for change in changes:
        change(model)
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def change_initializer(name: str, edit):
    def change(model):
        for init in model.graph.initializer:
            if init.name == name:
                init.CopyFrom(numpy_helper.from_array(edit(numpy_helper.to_array(init).copy()), name))
                return
        raise AssertionError(f"no initializer {name}")
    return change


def rename_tensor(old: str, new: str):
    def change(model):
        for value in [*model.graph.input, *model.graph.output]:
            if value.name == old:
                value.name = new
        for node in model.graph.node:
            node.input[:] = [new if n == old else n for n in node.input]
            node.output[:] = [new if n == old else n for n in node.output]
    return change


def set_op(node_name: str, op_type: str):
    def change(model):
        nodes = [n for n in model.graph.node if n.name == node_name]
        assert nodes, node_name
        nodes[0].op_type = op_type
    return change


def run(run_cli, candidate, reference, tmp_path, *extra):
    out = tmp_path / "diff.json"
    result = run_cli("diff", candidate, "--ref", reference, "--json", out, *extra)
    assert "Traceback" not in result.output
    data = json.loads(out.read_text()) if out.exists() else None
    return result, data


def kinds(data, severity=None) -> set[str]:
    return {d["kind"] for d in data["differences"] if severity is None or d["severity"] == severity}


def bump_weight(a):
    a.flat[0] += 1e-3
    return a


# -- the IOSpec read from a graph ------------------------------------------------------------

def test_io_spec_of_a_continuous_export():
    spec = io_spec_from_onnx(onnx.load(str(WALKER)))
    assert spec.input_names == ["obs_0", "obs_1"]
    assert spec.input("obs_0").shape == ("batch", 12) and spec.input("obs_0").role == "observation"
    roles = {t.name: t.role for t in spec.outputs}
    assert roles == {"version_number": "constant", "memory_size": "constant", "continuous_actions": "stochastic",
                     "continuous_action_output_shape": "constant", "deterministic_continuous_actions": "deterministic"}


def test_io_spec_of_a_discrete_export_reads_the_branches():
    spec = io_spec_from_onnx(onnx.load(str(BRANCHES)))
    mask = spec.input("action_masks")
    assert mask.role == "mask" and mask.segments == (3, 3, 2)
    assert spec.output("discrete_actions").role == "stochastic"
    assert spec.output("discrete_actions").segments == (3, 3, 2)
    deterministic = spec.output("deterministic_discrete_actions")
    assert deterministic.role == "deterministic" and deterministic.dtype == "int64"


def test_io_spec_of_an_older_export_without_deterministic_outputs():
    spec = io_spec_from_onnx(onnx.load(str(fixture_path("mlagents/public/Crawler.onnx"))))
    assert {t.name: t.role for t in spec.outputs} == {
        "version_number": "constant", "memory_size": "constant",
        "continuous_actions": "stochastic", "continuous_action_output_shape": "constant"}


# -- drop-in replacements ---------------------------------------------------------------------

@pytest.mark.parametrize("source,official", [
    (TINYWALKER, WALKER), (TINYBRANCHES, BRANCHES), ("Huggy", "Huggy/Huggy.onnx")])
def test_our_exports_are_drop_in_replacements_for_the_official_files(run_cli, tmp_path, source, official):
    if source == "Huggy":
        source, official = fixture_path("mlagents/Huggy"), fixture_path("mlagents/Huggy/Huggy.onnx")
    ours = tmp_path / "ours.onnx"
    assert run_cli("export", source, "-o", ours).exit_code == 0
    result, data = run(run_cli, ours, official, tmp_path)
    assert result.exit_code == 0, result.output
    assert data["drop_in"] is True and data["differences"] == []
    assert "verdict: DROP-IN" in result.output
    compared = {o["output"]: o for o in data["comparison"]["outputs"]}
    assert set(compared) == {v["name"] for v in data["reference"]["outputs"]}
    assert all(o["passed"] for o in compared.values())


def test_another_opset_is_a_drop_in_with_notes(run_cli, tmp_path):
    """Our opset-17 export of TinyBranches: the same numbers, renamed constants."""
    ours = tmp_path / "ours17.onnx"
    assert run_cli("export", TINYBRANCHES, "-o", ours, "--opset", "17").exit_code == 0
    result, data = run(run_cli, ours, BRANCHES, tmp_path)
    assert result.exit_code == 0, result.output
    assert kinds(data, "error") == set()
    assert {"opset", "ir-version"} <= kinds(data, "note")
    agreement = next(o for o in data["comparison"]["outputs"] if o["output"] == "deterministic_discrete_actions")
    assert agreement["rule"] == "agreement" and agreement["metrics"]["agreement"] == 1.0


@pytest.mark.parametrize("model", ["walker", "branches", "mlagents/public/Crawler.onnx", "mlagents/public/Pyramids.onnx"])
def test_a_model_against_itself_has_no_difference(run_cli, tmp_path, model):
    path = {"walker": WALKER, "branches": BRANCHES}.get(model) or fixture_path(model)
    result, data = run(run_cli, path, path, tmp_path)
    assert result.exit_code == 0, result.output
    assert data["differences"] == [] and data["drop_in"] is True
    assert data["first_divergence"] is None


def test_loaded_inputs_are_used_as_given(run_cli, tmp_path):
    oracle = DATA / "TinyWalker-1000.onnx.oracle.npz"
    result, data = run(run_cli, WALKER, WALKER, tmp_path, "--inputs", oracle)
    assert result.exit_code == 0, result.output
    with np.load(oracle) as arrays:
        assert data["inputs"]["batch"] == arrays["obs_0"].shape[0]
    assert data["inputs"]["source"] == str(oracle) and data["inputs"]["rows"] == {"loaded": 64}


# -- a different model -------------------------------------------------------------------------

def test_a_different_model_lists_every_contract_difference(run_cli, tmp_path):
    pyramids = fixture_path("mlagents/public/Pyramids.onnx")
    huggy = fixture_path("mlagents/Huggy/Huggy.onnx")
    result, data = run(run_cli, pyramids, huggy, tmp_path)
    assert result.exit_code == 3, result.output
    assert "NOT A DROP-IN" in result.output
    found = {(d["kind"], d["subject"]) for d in data["differences"]}
    assert ("reshaped-input", "obs_0") in found  # 56 vs 59 features
    assert {("extra-input", f"obs_{i}") for i in (1, 2, 3)} <= found
    assert ("extra-input", "action_masks") in found
    assert {("missing-output", n) for n in ("continuous_actions", "deterministic_continuous_actions")} <= found
    assert ("extra-output", "deterministic_discrete_actions") in found
    assert ("changed-initializer", "network_body._body_endoder.seq_layers.2.weight") in found
    assert {"producer", "operator-histogram", "numbers-not-compared"} <= kinds(data)
    assert data["comparison"] is None


# -- planted faults ---------------------------------------------------------------------------

def test_one_weight_moved_by_1e3_is_found_and_localized(run_cli, tmp_path):
    weight = "network_body._body_endoder.seq_layers.2.weight"
    candidate = plant(tmp_path, WALKER, change_initializer(weight, bump_weight))
    result, data = run(run_cli, candidate, WALKER, tmp_path)
    assert result.exit_code == 3
    changed = [d for d in data["differences"] if d["kind"] == "changed-initializer"]
    assert [d["subject"] for d in changed] == [weight] and changed[0]["severity"] == "error"
    assert changed[0]["details"]["max_abs"] == pytest.approx(1e-3, rel=1e-3)
    assert changed[0]["details"]["changed"] == 1 and changed[0]["details"]["at"] == [0, 0]
    assert ("numeric-mismatch", "deterministic_continuous_actions") in {(d["kind"], d["subject"]) for d in data["differences"]}
    first = data["first_divergence"]
    assert first["found"] and first["node"] == f"{BODY}/seq_layers.2/Gemm" and first["op_type"] == "Gemm"
    assert first["matched_by"] == "name" and first["inputs_agree"] is True
    assert [w["reference"] for w in first["changed_weights"]] == [weight]
    assert f"{BODY}/seq_layers.2/Gemm" in result.output  # shown in the first-divergence panel


def test_a_renamed_input_is_an_error_but_the_numbers_still_compare(run_cli, tmp_path):
    candidate = plant(tmp_path, WALKER, rename_tensor("obs_1", "observation_1"))
    result, data = run(run_cli, candidate, WALKER, tmp_path)
    assert result.exit_code == 3
    renamed = [d for d in data["differences"] if d["kind"] == "renamed-input"]
    assert len(renamed) == 1 and renamed[0]["details"] == {"reference": "obs_1", "candidate": "observation_1", "position": 1}
    assert kinds(data, "error") == {"renamed-input"}
    assert data["comparison"]["passed"] is True  # fed by position: same numbers


def test_reordered_outputs_are_an_error(run_cli, tmp_path):
    def move_last_output_first(model):
        outputs = list(model.graph.output)
        del model.graph.output[:]
        model.graph.output.extend([outputs[-1], *outputs[:-1]])

    candidate = plant(tmp_path, WALKER, move_last_output_first)
    result, data = run(run_cli, candidate, WALKER, tmp_path)
    assert result.exit_code == 3
    assert kinds(data, "error") == {"reordered-outputs"}
    reordered = next(d for d in data["differences"] if d["kind"] == "reordered-outputs")
    assert reordered["details"]["candidate"][0] == "deterministic_continuous_actions"
    assert data["comparison"]["passed"] is True


def test_a_fixed_batch_axis_is_an_error_and_compared_row_by_row(run_cli, tmp_path):
    def fix_batch(model):
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1

    candidate = plant(tmp_path, WALKER, fix_batch)
    result, data = run(run_cli, candidate, WALKER, tmp_path, "--draws", "64")
    assert result.exit_code == 3
    fixed = [d for d in data["differences"] if d["kind"] == "fixed-axis"]
    assert len(fixed) == 1 and fixed[0]["subject"] == "obs_0" and fixed[0]["details"]["axis"] == 0
    assert kinds(data, "error") == {"fixed-axis"}
    assert data["inputs"]["candidate_rows_per_call"] == 1
    assert data["comparison"]["passed"] is True  # a static-shape export with the same numbers


def test_a_renamed_dynamic_axis_is_only_a_note(run_cli, tmp_path):
    def rename_axis(model):
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"

    result, data = run(run_cli, plant(tmp_path, WALKER, rename_axis), WALKER, tmp_path)
    assert result.exit_code == 0, result.output
    assert [(d["kind"], d["severity"]) for d in data["differences"]] == [("axis-name", "note")]


def test_a_swapped_operator_is_localized_to_its_node(run_cli, tmp_path):
    """The Swish's Sigmoid replaced by Tanh in the first hidden layer."""
    candidate = plant(tmp_path, WALKER, set_op(f"{BODY}/seq_layers.1/Sigmoid", "Tanh"))
    result, data = run(run_cli, candidate, WALKER, tmp_path)
    assert result.exit_code == 3
    assert {"operator-histogram", "changed-operator"} <= kinds(data, "note")
    histogram = next(d for d in data["differences"] if d["kind"] == "operator-histogram")
    assert histogram["details"]["changed"] == {"Sigmoid": [2, 1], "Tanh": [0, 1]}
    first = data["first_divergence"]
    assert first["node"] == f"{BODY}/seq_layers.1/Sigmoid"
    assert (first["op_type"], first["candidate_op_type"]) == ("Sigmoid", "Tanh")
    assert first["inputs_agree"] is True and first["changed_weights"] == []


def test_mul_swapped_for_add_in_a_discrete_policy(run_cli, tmp_path):
    candidate = plant(tmp_path, BRANCHES, set_op(f"{BODY}/seq_layers.3/Mul", "Add"))
    result, data = run(run_cli, candidate, BRANCHES, tmp_path)
    assert result.exit_code == 3
    failed = {o["output"]: o for o in data["comparison"]["outputs"] if o["passed"] is False}
    assert "deterministic_discrete_actions" in failed
    assert failed["deterministic_discrete_actions"]["rule"] == "agreement"
    first = data["first_divergence"]
    assert (first["node"], first["op_type"], first["candidate_op_type"]) == (f"{BODY}/seq_layers.3/Mul", "Mul", "Add")


def test_an_altered_normalizer_constant_is_localized_to_the_normalizer(run_cli, tmp_path):
    # onnx::Div_61 is sqrt(running_variance / steps) of the first observation's normalizer
    candidate = plant(tmp_path, WALKER, change_initializer("onnx::Div_61", lambda a: a * 1.01))
    result, data = run(run_cli, candidate, WALKER, tmp_path)
    assert result.exit_code == 3
    changed = next(d for d in data["differences"] if d["kind"] == "changed-initializer")
    assert changed["subject"] == "onnx::Div_61" and changed["details"]["changed"] == 12
    first = data["first_divergence"]
    assert first["node"] == "/network_body/observation_encoder/processors.0/normalizer/Div"
    assert [w["reference"] for w in first["changed_weights"]] == ["onnx::Div_61"]


def test_a_dropped_output_is_an_error(run_cli, tmp_path):
    def drop(model):
        keep = [o for o in model.graph.output if o.name != "deterministic_continuous_actions"]
        del model.graph.output[:]
        model.graph.output.extend(keep)

    result, data = run(run_cli, plant(tmp_path, WALKER, drop), WALKER, tmp_path)
    assert result.exit_code == 3
    assert kinds(data, "error") == {"missing-output"}
    absent = next(o for o in data["comparison"]["outputs"] if o["output"] == "deterministic_continuous_actions")
    assert absent["rule"] == "absent" and absent["passed"] is None


def test_an_input_one_side_keeps_but_never_reads(run_cli, tmp_path):
    """Exporters differ in keeping unused inputs (ML-Agents drops action_masks when continuous)."""
    def add_unused_masks(model):
        model.graph.input.append(onnx.helper.make_tensor_value_info("action_masks", onnx.TensorProto.FLOAT, ["batch", 2]))

    keeps = plant(tmp_path, WALKER, add_unused_masks, name="keeps.onnx")
    result, data = run(run_cli, keeps, WALKER, tmp_path)
    assert result.exit_code == 3
    extra = next(d for d in data["differences"] if d["kind"] == "extra-input")
    assert extra["subject"] == "action_masks" and "never reads it" in extra["message"]
    assert ("unused-input", "action_masks") in {(d["kind"], d["subject"]) for d in data["differences"]}
    assert data["comparison"]["passed"] is True  # fed zeros it never reads: the numbers still compare

    result, data = run(run_cli, WALKER, keeps, tmp_path)  # the other way round: the candidate dropped it
    assert result.exit_code == 3
    missing = next(d for d in data["differences"] if d["kind"] == "missing-input")
    assert "never reads it, but callers feed it" in missing["message"]
    assert data["comparison"]["passed"] is True


def test_a_custom_operator_domain_that_cannot_run(run_cli, tmp_path):
    def custom_sigmoid(model):
        next(n for n in model.graph.node if n.name == f"{BODY}/seq_layers.1/Sigmoid").domain = "com.example"
        model.opset_import.append(onnx.helper.make_opsetid("com.example", 1))

    result, data = run(run_cli, plant(tmp_path, WALKER, custom_sigmoid), WALKER, tmp_path)
    assert result.exit_code == 3
    assert kinds(data, "error") == {"opset-domain", "not-runnable"}
    changed = next(d for d in data["differences"] if d["kind"] == "changed-operator")
    assert changed["details"] == {"reference": "Sigmoid", "candidate": "com.example::Sigmoid"}
    assert data["comparison"] is None


def test_an_altered_constant_output_is_an_error(run_cli, tmp_path):
    candidate = plant(tmp_path, WALKER, change_initializer("version_number.1", lambda a: a - 1))
    result, data = run(run_cli, candidate, WALKER, tmp_path)
    assert result.exit_code == 3
    constant = next(d for d in data["differences"] if d["kind"] == "constant-output")
    assert constant["subject"] == "version_number"
    assert constant["details"] == {"reference": [3.0], "candidate": [2.0]}
    assert data["first_divergence"]["op_type"] == "Identity"


def test_localization_pairs_by_position_when_names_differ(run_cli, tmp_path):
    """Old exporters number every tensor and node ('38', 'Gemm_7'): pairs by op and shape."""
    weight = "network_body._body_endoder.seq_layers.0.weight"

    def renumber(model):
        io = {v.name for v in [*model.graph.input, *model.graph.output]} | {i.name for i in model.graph.initializer}
        names = {}
        for i, node in enumerate(model.graph.node):
            node.name = f"{node.op_type}_{i}"
            for out in node.output:
                if out not in io:
                    names[out] = str(100 + len(names))
        for node in model.graph.node:
            node.input[:] = [names.get(n, n) for n in node.input]
            node.output[:] = [names.get(n, n) for n in node.output]

    candidate = plant(tmp_path, WALKER, renumber, change_initializer(weight, bump_weight))
    result, data = run(run_cli, candidate, WALKER, tmp_path)
    assert result.exit_code == 3
    first = data["first_divergence"]
    assert first["node"] == f"{BODY}/seq_layers.0/Gemm" and first["matched_by"] == "position"
    assert first["candidate_node"].startswith("Gemm_") and first["inputs_agree"] is True


def test_tolerances_can_be_widened(run_cli, tmp_path):
    weight = "network_body._body_endoder.seq_layers.2.weight"
    candidate = plant(tmp_path, WALKER, change_initializer(weight, bump_weight))
    result, data = run(run_cli, candidate, WALKER, tmp_path, "--atol", "0.05")
    assert result.exit_code == 0, result.output
    assert [(d["kind"], d["severity"]) for d in data["differences"]] == [("changed-initializer", "note")]
    assert data["tolerances"]["deterministic_continuous_actions"] == [0.05, 1e-4]


def test_the_library_call_matches_the_command(tmp_path):
    candidate = plant(tmp_path, BRANCHES, set_op(f"{BODY}/seq_layers.1/Sigmoid", "Tanh"))
    result = diff(candidate, BRANCHES, DiffOptions(batch=16, draws=32))
    assert not result.drop_in and result.first_divergence["node"] == f"{BODY}/seq_layers.1/Sigmoid"
    assert result.to_json()["verdict"] == "not-drop-in"


# -- unreadable files ---------------------------------------------------------------------------

@pytest.mark.parametrize("broken", ["truncated", "text", "checkpoint", "missing", "folder"])
def test_unreadable_files_are_one_line_errors(run_cli, tmp_path, broken):
    path = tmp_path / "broken.onnx"
    if broken == "truncated":
        path.write_bytes(WALKER.read_bytes()[:5000])
    elif broken == "text":
        path.write_text("this is not an ONNX model\n" * 20)
    elif broken == "checkpoint":
        path = TINYWALKER / "TinyWalker-1000.pt"
    elif broken == "folder":
        path = tmp_path
    for args in ((path, WALKER), (WALKER, path)):  # as the candidate and as the reference
        result, data = run(run_cli, *args, tmp_path)
        assert result.exit_code == 1, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0]
        assert data is None


def test_bad_inputs_files_are_one_line_errors(run_cli, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    hostile = tmp_path / "hostile.npz"
    np.savez(hostile, obs_0=np.array([Payload()], dtype=object), obs_1=np.zeros((1, 5), np.float32))
    wrong_key = tmp_path / "wrong.npz"
    np.savez(wrong_key, obs_0=np.zeros((2, 12), np.float32))
    wrong_dtype = tmp_path / "dtype.npz"
    np.savez(wrong_dtype, obs_0=np.zeros((2, 12)), obs_1=np.zeros((2, 5)))
    pickled = tmp_path / "pickled.npz"
    pickled.write_bytes(pickle.dumps(Payload()))
    empty = tmp_path / "empty.npz"
    np.savez(empty, obs_0=np.zeros((0, 12), np.float32), obs_1=np.zeros((0, 5), np.float32))
    for path, message in ((hostile, "not a readable .npz archive"), (wrong_key, "no array named 'obs_1'"),
                          (wrong_dtype, "'obs_0' is float64, the reference takes float32"),
                          (empty, "'obs_0' has no rows"),
                          (pickled, "not a readable .npz archive")):
        result = run(run_cli, WALKER, WALKER, tmp_path, "--inputs", path)[0]
        assert result.exit_code == 1 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    assert not marker.exists()


def test_json_to_stdout(run_cli, tmp_path):
    from click.testing import CliRunner

    from rlparity.cli import main

    result = CliRunner().invoke(main, ["diff", str(WALKER), "--ref", str(WALKER), "--json", "-", "--batch", "8"])
    data = json.loads(result.output[result.output.index("{\n"):result.output.rindex("}") + 1])
    assert data["schema"] == "rlparity.diff/1" and data["verdict"] == "drop-in"
    assert data["inputs"]["batch"] == 8


def test_scores_behind_discrete_decisions_are_found_for_ties():
    """deterministic_discrete_actions = Concat(ArgMax(softmax_b)): the softmaxes tell ties."""
    from rlparity.validators.diff import (
        GraphInfo,
        _with_scores,
        argmax_scores,
        generate_feeds,
    )

    info = GraphInfo(onnx.load(str(BRANCHES)))
    sources = argmax_scores(info, "deterministic_discrete_actions")
    assert sources == [f"/_discrete_distribution/Softmax{s}_output_0" for s in ("", "_1", "_2")]
    assert argmax_scores(info, "discrete_actions") is None  # sampled, not an ArgMax
    spec = io_spec_from_onnx(info)
    feeds = generate_feeds(spec, 16, 0)
    scored, scores = _with_scores(spec, info, feeds.arrays)
    key = scored.output("deterministic_discrete_actions").scores
    probabilities = scores[key]
    assert probabilities.shape == (16, 8)
    np.testing.assert_allclose(probabilities[:, :3].sum(axis=1), 1.0, rtol=1e-5)
    assert (probabilities[:, :3] * feeds.arrays["action_masks"][:, :3] == probabilities[:, :3]).all()  # masked out


def test_names_that_look_like_markup_are_shown_as_written(run_cli, tmp_path):
    """Tensor and node names come from the files: '[/y]' or 'out[bold]' are text, not table markup."""
    from onnx import TensorProto, helper

    def graph(op: str, path: Path) -> Path:
        x = helper.make_tensor_value_info("x[bold]", TensorProto.FLOAT, ["batch", 3])
        y = helper.make_tensor_value_info("[/y]", TensorProto.FLOAT, ["batch", 3])
        node = helper.make_node(op, ["x[bold]"], ["[/y]"], name="[/node]")
        model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
        onnx.save(model, str(path))
        return path

    result, data = run(run_cli, graph("Sigmoid", tmp_path / "c.onnx"), graph("Relu", tmp_path / "r.onnx"), tmp_path)
    assert result.exit_code == 3, result.output
    assert data["first_divergence"]["node"] == "[/node]"
    assert "[/y]" in result.output and "[/node]" in result.output and "x[bold]" in result.output


def test_a_reference_with_a_sequence_input_is_named_in_the_error(run_cli, tmp_path):
    from onnx import TensorProto, helper

    sequence = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    index = helper.make_tensor_value_info("i", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("SequenceAt", ["s", "i"], ["y"])], "g", [sequence, index], [y])
    path = tmp_path / "sequence.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    result, data = run(run_cli, path, path, tmp_path)
    assert result.exit_code == 1 and data is None
    assert result.output.strip() == f"error: {path}: input 's' is not a tensor of known type and rank; " \
                                    "rlparity diff compares tensor inputs"
