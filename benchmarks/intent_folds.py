"""Benchmark: the intent model's settings chosen by five-fold cross-validation on the examples alone.

Three settings, never chosen on a benchmark's corpus:
- how much MiniLM's sentence vector weighs among the model's features (`understanding.SENTENCES`);
- how sure the model must be to overrule a grammar (`IntentModel.overrules`): the grammars
  (`agent/profiles/dialog.py`, `car_intents.py`) read a request by its words wherever they stand, so a keyword
  can take a request that asks something else ("what time does the pharmacy close", "shut the roof window");
- how near an example of the intent a heard request must be, by MiniLM's vectors, not to be out of scope
  (`understanding.NOVEL`): words misheard into nothing ("Then pre-chalp.") that the classifier still places.

Each profile's examples (the car's with the default assistant's) in five folds by phrase, the model trained on
four (with their heard variants) and the whole policy (grammar, check, model) asked the fifth. Understood: the
right intent (the car's: the right topic) acted on, of the in-scope examples; out of scope: said so, of those.
Misheard: every `--every`-th of the profile's own examples said by the voices `heard_examples.py` uses (no
corpus benchmark speaks with them), clean or under road noise 10 dB below, heard by Moonshine and asked of
the policy of the example's fold: acted on as the example means, and acted on otherwise (a wrong action, or
any action for an example out of scope). Prints each and writes JSON with the processor named.

    python -m benchmarks.intent_folds [--sentences 0 2] [--novel 0 0.4] [--at 0.3 0.5 0.7 0.9] [--every 4]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import time
import zlib
from importlib import resources
from pathlib import Path
from typing import Any

from agent.machine import machine
from agent.profiles.car_intents import Command, topic
from agent.profiles.dialog import DefaultAssistant, DialogContext, Reply, Seen
from agent.profiles.in_car import InCarAssistant
from agent.profiles.understanding import NONE, NOVEL, SENTENCES, IntentModel, normalise, read_examples
from benchmarks.harness import write_result

FOLDS = 5
NEVER = float("inf")  # no check: the grammar's reading always stands
CTX = DialogContext(dt.datetime(2026, 12, 2, 9, 30), lambda: Seen(1), [("Hello there.", "Hello!")])
HEARD = DialogContext(CTX.now, CTX.seen, CTX.history, heard=True)
SNR_DB = 10.0
NOT_DONE = (NONE, "ask")  # what a policy does that is no action


def fold(text: str) -> int:
    """A phrase's fold, by its words: no phrase (typed or as heard) is judged by a model that learnt it."""
    return zlib.crc32(normalise(text).encode()) % FOLDS


def heard(profile: str, shared: bool = True) -> list[tuple[str, str, str]]:
    """(intent, heard, said) of `exemplars/heard-<profile>.tsv`; the car's with the default assistant's skills',
    as `read_examples`."""
    text = resources.files("agent.profiles").joinpath("exemplars", f"heard-{profile}.tsv").read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")]
    own = [(r[0], r[1], r[2]) for r in rows]
    if shared and profile != "default":
        own += [row for row in heard("default") if row[0] != NONE]
    return own


def misheard(profile: str, every: int) -> list[tuple[str, str, str]]:
    """(intent, heard, said): every `every`-th of the profile's own examples as Moonshine heard it said."""
    from agent.engines.cascade.models import moonshine_recognizer
    from benchmarks.heard_examples import said

    recognizer = moonshine_recognizer(False)
    rows = []
    t0 = time.monotonic()
    for n, (intent, request) in enumerate(read_examples(profile, shared=False)[::every]):
        rows.append((intent, recognizer.transcribe(said(n, request, SNR_DB, seed=20_000)).strip(), request))
        if (n + 1) % 100 == 0:
            print(f"  {profile}: {n + 1} examples heard ({time.monotonic() - t0:.0f} s)", flush=True)
    return rows


def label(reply: Reply) -> str:
    """What a policy took a request for, in the examples' labels (the car's by topic; "state": a question about
    how the car is, answered)."""
    if reply.tool_calls and reply.intent != "state":
        call = reply.tool_calls[0]
        return topic(Command(call["name"], call["arguments"]))
    return NONE if reply.intent in ("unknown", "empty") else reply.intent


def cross_validate(
    profile: str, sentences: float, novels: list[float], at: list[float], spoken: list[tuple[str, str, str]]
) -> dict[str, dict[str, float]]:
    """Per setting (novel, at): understood, out of scope said so, misheard acted on as meant and otherwise."""
    examples, variants = read_examples(profile), heard(profile)
    counts = {s: [0] * 8 for s in itertools.product(novels, at)}
    for k in range(FOLDS):
        train = [(i, t) for i, t in examples if fold(t) != k] + [(i, h) for i, h, s in variants if fold(s) != k]
        model = IntentModel(train, sentences=sentences)
        for (novel, threshold), c in counts.items():
            model.novel, model.overrule = novel, threshold

            def ask(text: str, ctx: DialogContext = CTX, model: IntentModel = model) -> str:
                return label((InCarAssistant(model) if profile == "car" else DefaultAssistant(model)).reply(text, ctx))

            for intent, text in examples:
                if fold(text) == k:
                    got = ask(text)
                    c[0 if intent != NONE else 2] += got == intent
                    c[1 if intent != NONE else 3] += 1
            for intent, text, said in spoken:
                if fold(said) == k:
                    got = ask(text, HEARD)
                    c[4] += got == intent
                    c[5] += got not in (intent, *NOT_DONE) if intent != NONE else got not in NOT_DONE
                    c[6] += 1
        print(f"  {profile}, sentence vectors weighing {sentences:g}: fold {k + 1} of {FOLDS}", flush=True)
    return {
        f"novel {novel:g}, " + ("no check" if threshold == NEVER else f"overruled from {threshold:g}"): {
            "understood": c[0] / c[1],
            "out_of_scope_said": c[2] / c[3],
            "misheard_as_meant": c[4] / max(1, c[6]),
            "misheard_done_otherwise": c[5] / max(1, c[6]),
        }
        for (novel, threshold), c in counts.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", nargs="+", type=float, default=[0.0, SENTENCES], help="weights to try")
    ap.add_argument("--novel", nargs="+", type=float, default=[0.0, NOVEL], help="nearness thresholds to try")
    ap.add_argument("--at", nargs="+", type=float, default=[0.3, 0.5, 0.7, 0.9], help="overrule thresholds")
    ap.add_argument("--every", type=int, default=4, help="one example in this many is said and heard")
    ap.add_argument("--json", type=Path, default=Path("results/intent_folds.json"))
    args = ap.parse_args()
    result: dict[str, Any] = {"machine": machine(), "folds": FOLDS, "every": args.every, "profiles": {}}
    lines = []
    for profile in ("default", "car"):
        spoken = misheard(profile, args.every)
        result["profiles"][profile] = {"misheard": len(spoken)}
        for weight in args.sentences:
            novels = args.novel if weight else [0.0]  # nearness is MiniLM's
            scores = cross_validate(profile, weight, novels, [NEVER, *args.at], spoken)
            result["profiles"][profile][f"sentences {weight:g}"] = scores
            for setting, s in scores.items():
                lines.append(
                    f"{profile:8s} sentences {weight:<4g} {setting:30s} understood {s['understood']:.1%}, out of "
                    f"scope said so {s['out_of_scope_said']:.1%}; misheard: as meant {s['misheard_as_meant']:.1%}, "
                    f"done otherwise {s['misheard_done_otherwise']:.1%}"
                )
    print("\n".join(lines))
    write_result(args.json, result)


if __name__ == "__main__":
    main()
