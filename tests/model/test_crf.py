"""Tests for the linear-chain CRF, checked against brute-force enumeration of all tag paths."""

import itertools

import pytest
import torch

from mlm_suite import MlmSuiteForTokenClassification
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.model.crf import FORBIDDEN_SCORE, ConditionalRandomField, allowed_transitions
from tests.helpers import layout_config

BIO_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
BIOES_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "E-PER", 4: "S-PER", 5: "B-LOC", 6: "E-LOC", 7: "S-LOC"}

# Rows of a (5, 5) batch: left-aligned, short prefix, non-contiguous, one late position, empty.
MASKS = torch.tensor(
    [
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 0],
        [0, 1, 0, 1, 1],
        [0, 0, 1, 0, 0],
        [0, 0, 0, 0, 0],
    ],
    dtype=torch.bool,
)


def random_crf(num_tags: int, seed: int, constraints=None) -> ConditionalRandomField:
    """A CRF with scores large enough that the argmax path is well separated."""
    torch.manual_seed(seed)
    crf = ConditionalRandomField(num_tags, constraints)
    with torch.no_grad():
        for param in crf.parameters():
            param.normal_()
    return crf


def brute_force(crf: ConditionalRandomField, emissions: torch.Tensor, mask: torch.Tensor):
    """Per row: (logZ over allowed paths, {path: score}) by enumerating every path, in float64."""
    transitions = crf.transitions.detach().double()
    start, end = crf.start_transitions.detach().double(), crf.end_transitions.detach().double()
    results = []
    for row_emissions, row_mask in zip(emissions.double(), mask):
        positions = row_mask.nonzero().flatten().tolist()
        scores = {}
        for path in itertools.product(range(crf.num_tags), repeat=len(positions)):
            if not path:
                continue
            links = list(zip(path, path[1:]))
            if not (
                crf.allowed_start[path[0]] and crf.allowed_end[path[-1]] and all(crf.allowed[i, j] for i, j in links)
            ):
                continue
            score = start[path[0]] + end[path[-1]] + sum(transitions[i, j] for i, j in links)
            score = score + sum(row_emissions[p, t] for p, t in zip(positions, path))
            scores[path] = score
        log_z = torch.logsumexp(torch.stack(list(scores.values())), 0) if scores else torch.zeros((), dtype=torch.double)
        results.append((log_z, scores))
    return results


@pytest.mark.parametrize("num_tags, seed", [(3, 0), (4, 1), (5, 2)])
@pytest.mark.parametrize("constrained", [False, True])
def test_matches_brute_force(num_tags: int, seed: int, constrained: bool) -> None:
    labels = {i: label for i, label in BIO_LABELS.items() if i < num_tags}
    constraints = allowed_transitions(labels, "BIO") if constrained else None
    crf = random_crf(num_tags, seed, constraints)
    emissions = torch.randn(*MASKS.shape, num_tags) * 2
    reference = brute_force(crf, emissions, MASKS)

    decoded = crf.viterbi_decode(emissions, MASKS)
    gold = torch.full(MASKS.shape, -100, dtype=torch.long)
    for row, (_, scores) in enumerate(reference):
        best_path = max(scores, key=lambda path: scores[path].item()) if scores else ()
        assert tuple(decoded[row]) == best_path
        if scores:
            gold[row, MASKS[row]] = torch.tensor(sorted(scores)[len(scores) // 2])  # any allowed path will do

    expected_nll = torch.stack(
        [
            log_z - scores[tuple(gold[row, MASKS[row]].tolist())] if scores else log_z
            for row, (log_z, scores) in enumerate(reference)
        ]
    )
    for dtype, tolerance in ((torch.float64, 1e-9), (torch.float32, 1e-4)):
        nll = crf.neg_log_likelihood(emissions.to(dtype), gold, MASKS, reduction="none")
        assert nll.dtype == dtype
        torch.testing.assert_close(nll.double(), expected_nll, atol=tolerance, rtol=tolerance)


def test_forbidden_gold_path_costs_the_penalty() -> None:
    crf = random_crf(5, 3, allowed_transitions(BIO_LABELS, "BIO"))
    emissions = torch.randn(1, 3, 5)
    allowed_nll = crf.neg_log_likelihood(emissions, torch.tensor([[1, 2, 0]]))
    forbidden_nll = crf.neg_log_likelihood(emissions, torch.tensor([[0, 2, 0]]))  # O -> I-PER
    assert (forbidden_nll - allowed_nll).item() == pytest.approx(-FORBIDDEN_SCORE, rel=1e-2)


def test_reductions_and_empty_rows() -> None:
    crf = random_crf(4, 4)
    emissions = torch.randn(*MASKS.shape, 4)
    tags = torch.randint(0, 4, MASKS.shape).masked_fill(~MASKS, -100)
    per_row = crf.neg_log_likelihood(emissions, tags, MASKS, reduction="none")
    assert per_row.shape == (5,) and per_row[-1] == 0 and (per_row[:-1] > 0).all()
    torch.testing.assert_close(crf.neg_log_likelihood(emissions, tags, MASKS), per_row.sum())
    torch.testing.assert_close(crf.neg_log_likelihood(emissions, tags, MASKS, reduction="mean"), per_row.sum() / 4)
    assert crf.neg_log_likelihood(emissions, tags, torch.zeros_like(MASKS), reduction="mean") == 0
    assert crf.viterbi_decode(emissions, torch.zeros_like(MASKS)) == [[]] * 5
    # The values at unselected positions must not matter.
    shuffled = torch.where(MASKS.unsqueeze(-1), emissions, torch.randn_like(emissions))
    torch.testing.assert_close(crf.neg_log_likelihood(shuffled, tags, MASKS, reduction="none"), per_row)


def test_invalid_inputs() -> None:
    crf = ConditionalRandomField(3)
    with pytest.raises(ValueError, match="Selected tags"):
        crf.neg_log_likelihood(torch.randn(1, 2, 3), torch.tensor([[0, -100]]))
    with pytest.raises(ValueError, match="emissions"):
        crf.viterbi_decode(torch.randn(1, 2, 4))
    with pytest.raises(ValueError, match="reduction"):
        crf.neg_log_likelihood(torch.randn(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), reduction="avg")


def test_gradients_flow() -> None:
    crf = random_crf(5, 5, allowed_transitions(BIO_LABELS, "BIO"))
    emissions = torch.randn(*MASKS.shape, 5, requires_grad=True)
    tags = torch.tensor(
        [[1, 2, 2, 0, -100], [3, 4, -100, -100, -100], [-100, 0, -100, 1, 2], [-100, -100, 3, -100, -100], [-100] * 5]
    )
    crf.neg_log_likelihood(emissions, tags, MASKS, reduction="mean").backward()
    for grad in (emissions.grad, crf.transitions.grad, crf.start_transitions.grad, crf.end_transitions.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    # Unselected positions get no gradient.
    assert (emissions.grad[~MASKS] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_finite(dtype: torch.dtype) -> None:
    crf = random_crf(5, 6, allowed_transitions(BIO_LABELS, "BIO")).to(dtype)
    emissions = (torch.randn(*MASKS.shape, 5) * 10).to(dtype).requires_grad_()
    tags = torch.tensor(crf.viterbi_decode(emissions, torch.ones_like(MASKS)))
    nll = crf.neg_log_likelihood(emissions, tags, reduction="none")
    assert nll.dtype == torch.float32 and torch.isfinite(nll).all() and (nll >= 0).all()
    nll.sum().backward()
    assert torch.isfinite(emissions.grad).all() and torch.isfinite(crf.transitions.grad).all()


def test_allowed_transitions_bio() -> None:
    allowed, start, end = allowed_transitions(BIO_LABELS, "bio")
    assert allowed.shape == (5, 5) and allowed.dtype == torch.bool
    o, b_per, i_per, b_loc, i_loc = range(5)
    assert allowed[b_per, i_per] and allowed[i_per, i_per] and allowed[i_per, o] and allowed[o, b_loc]
    assert allowed[i_loc, b_per] and allowed[b_per, b_per]
    assert not allowed[o, i_per] and not allowed[b_loc, i_per] and not allowed[i_per, i_loc]
    assert start.tolist() == [True, True, False, True, False]
    assert end.all()
    # Every I-X column allows exactly B-X and I-X as predecessors.
    assert allowed[:, i_loc].nonzero().flatten().tolist() == [b_loc, i_loc]


def test_allowed_transitions_bioes() -> None:
    allowed, start, end = allowed_transitions({str(i): label for i, label in BIOES_LABELS.items()}, "BIOES")
    o, b_per, i_per, e_per, s_per, b_loc, e_loc, s_loc = range(8)
    assert allowed[b_per].nonzero().flatten().tolist() == [i_per, e_per]
    assert allowed[i_per].nonzero().flatten().tolist() == [i_per, e_per]
    for closed in (o, e_per, s_per, e_loc, s_loc):
        assert allowed[closed].nonzero().flatten().tolist() == [o, b_per, s_per, b_loc, s_loc]
    assert not allowed[b_loc, e_per] and allowed[b_loc, e_loc]
    assert start.nonzero().flatten().tolist() == [o, b_per, s_per, b_loc, s_loc]
    assert end.nonzero().flatten().tolist() == [o, e_per, s_per, e_loc, s_loc]


def test_allowed_transitions_iob1_and_io() -> None:
    labels = {0: "O", 1: "I-PER", 2: "B-PER", 3: "I-LOC"}
    allowed, start, end = allowed_transitions(labels, "IOB1")
    assert allowed[:, 2].tolist() == [False, True, True, False]
    assert allowed[:, [0, 1, 3]].all() and start.tolist() == [True, True, False, True] and end.all()
    io = allowed_transitions({0: "O", 1: "I-PER"}, "IO")
    assert all(mask.all() for mask in io)


@pytest.mark.parametrize(
    "labels, scheme, bad",
    [
        ({0: "O", 1: "B-PER", 2: "E-PER"}, "BIO", "E-PER"),
        ({0: "O", 1: "B-PER"}, "IO", "B-PER"),
        ({0: "O", 1: "PER"}, "BIOES", "PER"),
        ({0: "O", 1: "B-"}, "BIO", "B-"),
        ({0: "O", 1: "BI-PER"}, "BIOES", "BI-PER"),
    ],
)
def test_allowed_transitions_rejects_bad_labels(labels: dict, scheme: str, bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        allowed_transitions(labels, scheme)


def test_allowed_transitions_rejects_bad_scheme_and_ids() -> None:
    with pytest.raises(ValueError, match="scheme"):
        allowed_transitions(BIO_LABELS, "BILOU")
    with pytest.raises(ValueError, match="keys"):
        allowed_transitions({0: "O", 2: "B-PER"}, "BIO")


def test_state_dict_holds_only_parameters_and_constraints_rebuild() -> None:
    constraints = allowed_transitions(BIO_LABELS, "BIO")
    crf = ConditionalRandomField(5, constraints)
    assert set(crf.state_dict()) == {"transitions", "start_transitions", "end_transitions"}
    # Transformers materialises non-persistent buffers from meta as uninitialised memory.
    with torch.device("meta"):
        meta_crf = ConditionalRandomField(5, allowed_transitions(BIO_LABELS, "BIO"))
    meta_crf.to_empty(device="cpu")
    meta_crf.allowed.fill_(True)
    meta_crf.reset_parameters()
    for buffer, expected in zip((meta_crf.allowed, meta_crf.allowed_start, meta_crf.allowed_end), constraints):
        assert torch.equal(buffer, expected)
    with pytest.raises(ValueError, match="shapes"):
        ConditionalRandomField(4, constraints)


def test_crf_refuses_a_flattened_batch():
    model = MlmSuiteForTokenClassification(layout_config(use_crf=True, tagging_scheme="BIO", id2label={0: "O", 1: "B-X", 2: "I-X"}))
    flat = flatten_batch({"input_ids": torch.tensor([[5, 6, 7, 8]]), "labels": torch.tensor([[0, 1, 2, 0]])})
    with pytest.raises(ValueError, match="padded batches, not flattened"):
        model(**flat)
