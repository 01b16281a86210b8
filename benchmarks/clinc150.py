"""CLINC150: requests crowd workers wrote for 150 intents of a general assistant, and 1,200 no assistant answers.

The intent model's examples and the other corpora were written here; CLINC150 (Larson et al., EMNLP 2019,
https://github.com/clinc/oos-eval, CC BY 3.0) was written by others, for other assistants, so what the offline
assistants take its requests for is a figure nobody here could tune. Most of its intents (banking, travel,
cooking, ...) are out of scope for both assistants; a few are theirs (`agent/profiles/clinc150.py` maps
them), and a few are left out where what the assistant should do is unclear.

Its test splits (`test`, `oos_test`) become `corpora/clinc150-test.tsv` and its validation splits
`corpora/clinc150-val.tsv`, each less any request the examples have; the first `--per-intent` requests of each
intent of its train split (less any request of the corpora here) become the intent model's examples of what each
assistant cannot do, and of the few intents it can (`agent/profiles/exemplars/clinc150.tsv`). Run once, from the
dataset's `data/data_full.json`:

    python -m benchmarks.clinc150 data_full.json [--per-intent 8] [--per-skill 8]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from importlib import resources
from pathlib import Path

from agent.profiles.clinc150 import INTENTS
from agent.profiles.understanding import normalise, read_examples

CORPORA = Path(__file__).parent / "corpora"
SOURCE = "CLINC150 (Larson et al. 2019), github.com/clinc/oos-eval at 828f809, data/data_full.json, CC BY 3.0"


def _ours() -> set[str]:
    return {normalise(r) for p in ("default", "car") for h in (False, True) for _, r in read_examples(p, h)}


def _corpora() -> set[str]:
    """Every request of the corpora written here, which the examples must not have."""
    from benchmarks.understanding import NAMES, ONLY, PROFILES, read_corpus

    return {normalise(t) for n in NAMES for p in ONLY.get(n, PROFILES) for _, t in read_corpus(p, n)}


def _write(path: Path, header: str, rows: list[tuple[str, str]]) -> None:
    lines = [f"# {header}", *(f"{label}\t{' '.join(text.split())}" for label, text in rows)]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    print(f"wrote {path}: {len(rows)} requests")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="data_full.json of github.com/clinc/oos-eval")
    ap.add_argument("--per-intent", type=int, default=8, help="train requests per intent kept as examples")
    ap.add_argument("--per-skill", type=int, default=8, help="... per intent that is a skill here")
    args = ap.parse_args()
    data = json.loads(args.data.read_text("utf-8"))
    split = {name: [(intent, text) for text, intent in rows] for name, rows in data.items()}
    ours = _ours()
    test = [(i, t) for i, t in split["test"] + split["oos_test"] if normalise(t) not in ours]
    val = [(i, t) for i, t in split["val"] + split["oos_val"] if normalise(t) not in ours]
    held = {normalise(t) for _, t in test + val} | _corpora()
    taken: dict[str, list[str]] = defaultdict(list)
    for intent, text in split["train"] + split["oos_train"]:
        said = normalise(text)
        wanted = args.per_skill if any(intent in mine for mine in INTENTS.values()) else args.per_intent
        if len(taken[intent]) < wanted and said not in ours and said not in held:
            taken[intent].append(text)
    train = [(intent, text) for intent, texts in taken.items() for text in texts]
    note = "clinc intent<TAB>request ('oos': no intent of its 150); less any request the examples have"
    _write(CORPORA / "clinc150-test.tsv", f"{SOURCE}: the test and oos_test splits; {note}", test)
    _write(CORPORA / "clinc150-val.tsv", f"{SOURCE}: the val and oos_val splits; {note}", val)
    exemplars = resources.files("agent.profiles").joinpath("exemplars", "clinc150.tsv")
    header = (
        f"{SOURCE}: the first {args.per_intent} of each intent's train split ({args.per_skill} of a skill's here), "
        f"less any test or val request or any of the corpora here; {note}"
    )
    _write(Path(str(exemplars)), header, train)


if __name__ == "__main__":
    main()
