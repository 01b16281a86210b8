"""Benchmark: the intent model's settings chosen by five-fold cross-validation on the examples alone.

Two settings, never chosen on a benchmark's corpus: how much MiniLM's sentence vector weighs among the model's
features (`understanding.SENTENCES`, `sentence_vectors.py`), and how sure the model must be to overrule a
grammar. The grammars
(`agent/profiles/dialog.py`, `car_intents.py`) read a request by its words wherever they stand, so a keyword can
take a request that asks something else ("what time does the pharmacy close", "shut the roof window"), and the
policies let the model overrule them where it is sure of another intent, or of none (`IntentModel.overrules`).
Each profile's examples (the car's with the default assistant's) in five folds by phrase, the model trained on
four (with their heard variants) and the whole policy (grammar, check, model) asked the fifth, for each weight
and threshold and with no check. Understood: the right intent (the car's: the right topic) acted on, of the in-scope
examples; out of scope: said so, of those. Prints both and writes JSON with the processor named.

    python -m benchmarks.intent_folds [--sentences 0 2] [--at 0.3 0.5 0.7 0.9] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import zlib
from pathlib import Path
from typing import Any

from agent.machine import machine
from agent.profiles.car_intents import topic
from agent.profiles.dialog import DefaultAssistant, DialogContext, Reply, Seen
from agent.profiles.in_car import InCarAssistant
from agent.profiles.understanding import NONE, SENTENCES, IntentModel, normalise, read_examples
from benchmarks.harness import write_result

FOLDS = 5
NEVER = float("inf")  # no check: the grammar's reading always stands
CTX = DialogContext(dt.datetime(2026, 12, 2, 9, 30), lambda: Seen(1), [("Hello there.", "Hello!")])


def fold(text: str) -> int:
    """A phrase's fold, by its words: no phrase (typed or as heard) is judged by a model that learnt it."""
    return zlib.crc32(normalise(text).encode()) % FOLDS


def heard(profile: str, shared: bool = True) -> list[tuple[str, str, str]]:
    """(intent, heard, said) of `exemplars/heard-<profile>.tsv`; the car's with the default assistant's skills',
    as `read_examples`."""
    from importlib import resources

    text = resources.files("agent.profiles").joinpath("exemplars", f"heard-{profile}.tsv").read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")]
    own = [(r[0], r[1], r[2]) for r in rows]
    if shared and profile != "default":
        own += [row for row in heard("default") if row[0] != NONE]
    return own


def label(reply: Reply) -> str:
    """What a policy took a request for, in the examples' labels (the car's by topic)."""
    if reply.tool_calls:
        from agent.profiles.car_intents import Command

        call = reply.tool_calls[0]
        return topic(Command(call["name"], call["arguments"]))
    return NONE if reply.intent in ("unknown", "empty") else reply.intent


def cross_validate(profile: str, at: list[float], sentences: float) -> dict[str, dict[str, float]]:
    examples = read_examples(profile)
    variants = heard(profile)
    counts = {t: [0, 0, 0, 0] for t in at}  # in scope right, in scope, out of scope said so, out of scope
    for k in range(FOLDS):
        train = [(i, t) for i, t in examples if fold(t) != k] + [(i, h) for i, h, s in variants if fold(s) != k]
        model = IntentModel(train, sentences=sentences)
        for threshold in at:
            model.overrule = threshold
            c = counts[threshold]
            for intent, text in examples:
                if fold(text) != k:
                    continue
                policy = InCarAssistant(model) if profile == "car" else DefaultAssistant(model)
                got = label(policy.reply(text, CTX))
                c[0 if intent != NONE else 2] += got == intent
                c[1 if intent != NONE else 3] += 1
        print(f"  {profile}, sentence vectors weighing {sentences:g}: fold {k + 1} of {FOLDS}", flush=True)
    return {
        "none" if t == NEVER else f"{t:g}": {"understood": c[0] / c[1], "out_of_scope_said": c[2] / c[3]}
        for t, c in counts.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", nargs="+", type=float, default=[0.0, SENTENCES], help="weights to try")
    ap.add_argument("--at", nargs="+", type=float, default=[0.3, 0.5, 0.7, 0.9], help="thresholds to try")
    ap.add_argument("--json", type=Path, default=Path("results/intent_folds.json"))
    args = ap.parse_args()
    result: dict[str, Any] = {"machine": machine(), "folds": FOLDS, "profiles": {"default": {}, "car": {}}}
    lines = []
    for profile in ("default", "car"):
        for weight in args.sentences:
            scores = cross_validate(profile, [NEVER, *args.at], weight)
            result["profiles"][profile][f"sentences {weight:g}"] = scores
            for threshold, s in scores.items():
                check = "no check" if threshold == "none" else f"overruled from {threshold}"
                lines.append(
                    f"{profile:8s} sentences {weight:<4g} {check:20s} understood {s['understood']:.1%}, "
                    f"out of scope said so {s['out_of_scope_said']:.1%}"
                )
    print("\n".join(lines))
    write_result(args.json, result)


if __name__ == "__main__":
    main()
