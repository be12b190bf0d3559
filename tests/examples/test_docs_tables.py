"""docs/estimators.md's hyperparameter table is generated from the estimator registry;
this test regenerates it and compares, so the page cannot drift from the code.

To refresh the page after changing an estimator's signature::

    python tests/examples/test_docs_tables.py > /tmp/table.md   # paste between the markers
"""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "estimators.md"
PIPE = " \\| "  # a "|" inside a Markdown table cell
BEGIN, END = "<!-- estimator-params:begin -->", "<!-- estimator-params:end -->"


def params_table() -> str:
    """Markdown table: one row per shipped (``agentrl.credit``) estimator, sorted, with its keyword
    hyperparameters and defaults, allowed choices, required TurnTable columns and whether
    it fixes an update order or has a breakdown of its advantage."""
    from agentrl.credit import get_estimator, list_estimators

    rows = ["| registry name | hyperparameters (defaults) | choices | requires | update order | breakdown |",
            "|---|---|---|---|---|---|"]
    for name in list_estimators():
        spec = get_estimator(name)
        if not spec.fn.__module__.startswith("agentrl.credit."):
            continue  # registered by examples or tests in this process, not shipped
        params = ", ".join(f"`{k}={v!r}`" for k, v in spec.params.items()) or "none"
        choices = "; ".join(f"`{k}`: " + PIPE.join(map(str, v)) for k, v in spec.choices.items()) or "—"
        requires = ", ".join(f"`{c}`" for c in spec.requires) or "—"
        rows.append(f"| `{name}` | {params} | {choices} | {requires} | {'yes' if spec.update_order else '—'} | "
                    f"{'yes' if spec.breakdown else '—'} |")
    return "\n".join(rows)


def test_estimator_params_table_matches_registry():
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{DOC} lacks the markers {BEGIN} / {END}"
    documented = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert documented == params_table(), "docs/estimators.md is stale; regenerate the table (see module doc)"


if __name__ == "__main__":
    print(params_table())
