"""What a request asks for, however it is said, and how sure that is.

The grammars (`dialog.py`, `car_intents.py`) read the requests they know word for word, slots and all; a
request they do not know ("How late is it?", "It's stuffy in here", "Let some fresh air in through the roof")
goes to a classifier trained on examples of each intent (`exemplars/<profile>.tsv`) when the policy is built.
The classifier also checks the grammars: where it is sure a request asks something else than a keyword the
grammar caught ("what time does the pharmacy close", "shut the roof window"), its reading stands
(`IntentModel.overrules`).
It reads four things: the request's words and word pairs and its letters in fours (TF-IDF, scikit-learn),
which say which words carry an intent wherever they stand and forgive a recogniser's near misses; its
WordLlama vector (static embeddings distilled from Llama 2's, 256 numbers, weights and tokenizer inside the
`wordllama` wheel, MIT: nothing is fetched), which brings words the examples never used near those they did;
and MiniLM's sentence vector (`sentence_vectors.py`), which reads the words together ("my feet are like ice"
is a wish to be warmer). A reply costs a few ms of CPU (`benchmarks/understanding.py`). The model places a
request's topic; the grammars say which way and keep the slots exact. A spoken request reaches it as the
recogniser heard it, so it learns the examples' near misses too (`heard-<profile>.tsv`: each example said by
espeak-ng and heard by Moonshine, `benchmarks/heard_examples.py`), "Open the door logs." with the doors.

"none" is one more intent, trained on requests no skill answers (the weather, a joke), and on 1,200 that strangers
wrote for other assistants (CLINC150, `clinc150.py`: a bank balance, a recipe, a flight; and the few that are a
skill here, in strangers' words), each counting `STRANGERS` of an example written here: a request most like
those, or like nothing (no intent above `UNSURE`; or, heard, by MiniLM's vector near no example of the intent
it is taken for: `NOVEL`), is out of scope and said so; one only fairly likely
(below `SURE`) is asked back ("Did you mean ...?"). An intent whose own words the request has (the policy's
cues: "weekend", "air con") is a little more likely. The two thresholds were chosen by five-fold
cross-validation on the examples alone, never on a benchmark's corpus: at 0.5 and 0.3, 86 % of the default
assistant's held-out examples (90 % of the car's) were acted on rightly, 3.5 % (2.9 %) wrongly, and 90 %
(85 %) of those out of scope said so.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from agent.profiles.clinc150 import intent_of

log = logging.getLogger(__name__)

NONE = "none"  # no skill for it
SURE, UNSURE = 0.5, 0.3  # probabilities: act on it; below, ask back; below that, out of scope
# How much MiniLM's sentence vector weighs beside the rest (`sentence_vectors.py`): chosen by five-fold
# cross-validation on the examples (`python -m benchmarks.intent_folds --sentences 0 1 2 3`)
SENTENCES = 2.0
# A heard request nearer no example of the intent it is taken for than this (cosine of MiniLM's vectors) is out
# of scope: chosen the same way (`--novel`), by the sum over both assistants of the shares of the misheard
# examples acted on as meant, less those acted on otherwise
NOVEL = 0.5
# How much each of CLINC150's examples (`clinc150.py`: strangers' words, most of them for no skill here) counts
# beside one written here, and how sure the model must be that a request the grammar reads is out of scope to
# overrule it: its nouns of every kind ("jazz", "playlist", "receipt") lean toward none, so a grammar's "put on
# some jazz" would be 0.69 out of scope. Both chosen on the corpora already read and CLINC150's validation split
# (`--corpus clinc150-val`), before heldout9 and its test split were measured
STRANGERS = 0.3
OVERRULE_NONE = 0.7
# The profiles whose heard requests are near an example where one of their clauses is, not only the whole:
# among reasons and asides ("sorry, I was rinsing the cups. What was that you just said?") one clause asks.
# Not the car's: there a misheard clause near an example ("I can't see a thing", "next", "thanks") moves a part
# or answers for a request that was something else (heldout12 in noise, 31 in-scope requests acted on wrongly
# with the whole alone, 36 with its clauses); the default assistant only answers (heldout12, 6 either way)
NEAR_IN_CLAUSES = frozenset({"default"})


@dataclass(frozen=True, slots=True)
class Guess:
    intent: str  # NONE when out of scope
    score: float  # the intent's probability
    sure: bool  # likely enough to act on; otherwise (intent not NONE) worth asking back


def normalise(text: str) -> str:
    """Lower case, words and apostrophes only: how requests are compared (typed or recognised)."""
    text = text.lower().replace("’", "'")
    text = re.sub(r"[^a-z0-9' ]+", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def clauses(text: str) -> list[str]:
    """`text`'s clauses, normalised, none empty: where a request is among reasons and asides ("sorry, I was
    rinsing the cups. What was that you just said?"), one of them asks it."""
    return [c for c in (normalise(part) for part in re.split(r"[,;!?]|[.:](?!\d)", text)) if c]  # not "9:00"


_lock = threading.Lock()
_embedder: Any = None
_models: dict[str, IntentModel] = {}


def embed(texts: list[str]) -> np.ndarray:
    """Unit vectors, one row per text (WordLlama l2_supercat, 256 dimensions), loaded once per process."""
    global _embedder
    with _lock:
        if _embedder is None:
            from safetensors import safe_open
            from tokenizers import Tokenizer
            from wordllama.inference import WordLlamaInference

            # WordLlama.load() looks for its tokenizer in a folder the wheel does not have, then downloads it;
            # both files are in the wheel, so they are opened from there
            package = resources.files("wordllama")
            with safe_open(str(package / "weights" / "l2_supercat_256.safetensors"), "np") as f:
                table = f.get_tensor("embedding.weight")
            tokenizer = Tokenizer.from_file(str(package / "tokenizers" / "l2_supercat_tokenizer_config.json"))
            _embedder = WordLlamaInference(table, tokenizer)
    return np.asarray(_embedder.embed(texts, norm=True), np.float32)


def read_examples(profile: str, heard: bool = False, shared: bool = True) -> list[tuple[str, str]]:
    """(intent, request) pairs of `exemplars/<profile>.tsv`; or, `heard`, the same as the recogniser heard
    them spoken (`heard-<profile>.tsv`, made by `benchmarks/heard_examples.py`). Unless not `shared`, the
    car's include the default assistant's skills."""
    name = f"heard-{profile}.tsv" if heard else f"{profile}.tsv"
    pairs = read_pairs(resources.files("agent.profiles").joinpath("exemplars", name).read_text("utf-8"))
    if shared and profile != "default":
        pairs += [(i, r) for i, r in read_examples("default", heard) if i != NONE]
    return pairs


def read_clinc150(profile: str) -> list[tuple[str, str]]:
    """(intent, request) pairs of CLINC150's examples (`exemplars/clinc150.tsv`, `clinc150.py`) for `profile`
    ("default" or "car"), less those whose intent is unclear there."""
    text = resources.files("agent.profiles").joinpath("exemplars", "clinc150.tsv").read_text("utf-8")
    return [(intent, r) for clinc, r in read_pairs(text) if (intent := intent_of(profile, clinc)) is not None]


@functools.cache
def vocabulary(profile: str, least: int = 3) -> tuple[str, ...]:
    """The words a profile's requests are made of, for the recogniser to lean toward (`phrase_bias.py`): each
    word of its in-scope examples (the shared ones too) that at least `least` of them have, less the
    stop words ("the", "could") that every kind of speech has, and each pair of such words as often side by
    side ("seat heating", "air con")."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    requests = [normalise(request).split() for intent, request in read_examples(profile) if intent != NONE]
    counts: dict[str, int] = {}
    for words in requests:
        kept = [w for w in words if w not in ENGLISH_STOP_WORDS and len(w) > 1]
        pairs = [f"{a} {b}" for a, b in zip(words, words[1:], strict=False) if a in kept and b in kept]
        for item in {*kept, *pairs}:
            counts[item] = counts.get(item, 0) + 1
    return tuple(sorted(item for item, n in counts.items() if n >= least))


def read_pairs(text: str) -> list[tuple[str, str]]:
    """label<TAB>request lines (more columns after them are notes), less comments and blank lines."""
    rows = [line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [(row[0], row[1]) for row in rows]


class IntentModel:
    """A linear classifier over a request's words, its letters and its sentence vector, trained on the examples
    when the model is built (3-4 s): word and letter n-grams (TF-IDF) say which words carry an intent
    wherever they stand, letter n-grams forgive a recogniser's near misses ("sun roof", "windscreens"), the
    WordLlama vector brings words the examples never used near those they did. Trained with "none" as one
    more intent, a request nearest the things it cannot do is out of scope."""

    def __init__(
        self,
        examples: list[tuple[str, str]],
        sure: float = SURE,
        unsure: float = UNSURE,
        cue: float = 1.0,
        regularisation: float = 0.05,
        overrule: float | None = None,
        sentences: float = 0.0,
        novel: float = 0.0,
        weights: list[float] | None = None,
        overrule_none: float | None = None,
        near_in_clauses: bool = False,
    ) -> None:
        """`sure`: an intent this probable is acted on; below `unsure`, nothing is (out of scope); between,
        asked back. `cue`: how much nearer an intent whose own words the request has is (in log-odds).
        `overrule`: how probable another intent must be to overrule a grammar's reading (`sure` unless given);
        `overrule_none`: how probable none must be (`overrule` unless given).
        `sentences`: the weight of MiniLM's sentence vector among the features (0: not read). `novel`: with
        it, a heard request whose MiniLM vector is no nearer (cosine) than this to any example of the intent it
        is taken for is like nothing the model knows of it, and out of scope (0: never); `near_in_clauses`: unless
        one of its clauses is that near. `weights`: how much each example counts (1 each unless given)."""
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        weights = [1.0] * len(examples) if weights is None else weights
        rows = [(i, said, w) for (i, request), w in zip(examples, weights, strict=True) if (said := normalise(request))]
        self.intents = sorted({intent for intent, _, _ in rows})
        requests = [said for _, said, _ in rows]
        labels = np.array([self.intents.index(intent) for intent, _, _ in rows])
        weight = np.array([w for _, _, w in rows])
        self._words = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"[a-z0-9']+")
        self._letters = TfidfVectorizer(analyzer="char_wb", ngram_range=(4, 4), sublinear_tf=True)
        self.sentences, self.novel = sentences, novel if sentences else 0.0
        self.near_in_clauses = near_in_clauses
        self._examples = (self._sentence(requests, keep=True), labels)  # each example's MiniLM vector, its intent
        features = self._features(requests, self._examples[0], fit=True)
        self._classifier = LogisticRegression(C=1 / regularisation, max_iter=300).fit(features, labels, weight)
        self.sure, self.unsure, self.cue = sure, unsure, cue
        self.overrule = sure if overrule is None else overrule
        self.overrule_none = self.overrule if overrule_none is None else overrule_none
        # a turn asks of the same words several times (the second reading's `acts_on`, the reply, the general
        # assistant's reply within the car's): the last few requests' readings are kept, not computed again
        self._scores = functools.lru_cache(maxsize=256)(self._read)
        self._clauses = functools.lru_cache(maxsize=256)(self._read_clauses)  # ... and their clauses' vectors

    def _sentence(self, texts: list[str], keep: bool = False) -> np.ndarray | None:
        """MiniLM's vectors of `texts` (normalised), where the model reads them."""
        if not self.sentences:
            return None
        from agent.profiles.sentence_vectors import vectors

        return vectors(texts, keep=keep)

    def _features(self, texts: list[str], sentence: np.ndarray | None, fit: bool = False) -> Any:
        from scipy import sparse

        words = self._words.fit_transform(texts) if fit else self._words.transform(texts)
        letters = self._letters.fit_transform(texts) if fit else self._letters.transform(texts)
        parts = [words, letters, sparse.csr_matrix(embed(texts))]
        if sentence is not None:
            parts.append(sparse.csr_matrix(self.sentences * sentence))
        return sparse.hstack(parts).tocsr()

    @classmethod
    def for_profile(cls, profile: str) -> IntentModel:
        """The model of a profile's examples, with MiniLM's vectors where its wheel is installed: built once per
        process (read-only afterwards)."""
        if profile not in _models:
            from agent.profiles import sentence_vectors

            if not sentence_vectors.available():
                log.warning(
                    "%s is not installed (scripts/setup.sh installs it): requests are read without MiniLM's "
                    "sentence vectors, less well",
                    sentence_vectors.PACKAGE,
                )
            sentences = SENTENCES if sentence_vectors.available() else 0.0
            own = read_examples(profile) + read_examples(profile, heard=True)
            strangers = read_clinc150(profile)
            weights = [1.0] * len(own) + [STRANGERS] * len(strangers)
            model = cls(
                own + strangers,
                sentences=sentences,
                novel=NOVEL,
                weights=weights,
                overrule_none=OVERRULE_NONE,
                near_in_clauses=profile in NEAR_IN_CLAUSES,
            )
            with _lock:
                _models.setdefault(profile, model)
        return _models[profile]

    def _read(self, said: str) -> tuple[np.ndarray, np.ndarray | None]:
        """A normalised request's log-probabilities per intent (in `intents` order, before any cue) and its MiniLM
        vector (a row), for `_scores` to keep."""
        sentence = self._sentence([said])
        return self._classifier.predict_log_proba(self._features([said], sentence))[0], sentence

    def log_probabilities(self, text: str) -> np.ndarray:
        """Per intent (in `intents` order), before any cue."""
        return self._scores(normalise(text))[0].copy()

    def probabilities(self, text: str) -> np.ndarray:
        """Per intent (in `intents` order), before any cue."""
        return np.exp(self.log_probabilities(text))

    def overrules(self, guess: Guess, read: str, among: Iterable[str] = ()) -> bool:
        """Whether `guess`, of something other than what a grammar `read`, is taken instead: it is when the model
        is as sure as it must be to act (`overrule`, `sure` by default) of an intent `among` those given, or as
        sure as `overrule_none` that it is out of scope. The first threshold was chosen by five-fold
        cross-validation on the examples alone (`python -m benchmarks.intent_folds`), the second with CLINC150's
        examples (`OVERRULE_NONE`)."""
        if guess.intent == read:
            return False
        if guess.intent == NONE:
            return guess.score >= self.overrule_none
        return guess.score >= self.overrule and guess.intent in among

    def guess(self, text: str, cued: Iterable[str] = (), heard: bool = False) -> Guess:
        """`cued`: intents whose own words the request has ("degrees", "camera"): each is `cue` more likely.
        `heard`: the text is what a recogniser heard, which may be misheard into nothing: then, near no example
        of the intent it is taken for (`novel`), as a whole or in any of its clauses (`text` as heard, with its
        punctuation), it is out of scope. Typed, it is what the user meant to say, however unlike the examples (a
        long preamble, "copy me: ...")."""
        if not normalise(text):  # nothing of it a word ("???", another script): WordLlama gives no vector
            return Guess(NONE, 0.0, False)
        z, sentence = self._scores(normalise(text))
        z = z.copy()
        for intent in cued:
            if intent in self.intents:
                z[self.intents.index(intent)] += self.cue
        p = np.exp(z - z.max())
        p /= p.sum()
        i = int(np.argmax(p))
        intent, probability = self.intents[i], float(p[i])
        if intent == NONE or probability < self.unsure:
            return Guess(NONE, probability, True)
        if heard and self._unlike_its_examples(text, sentence, i):  # scored as likely as "none" is: it does not
            # overrule a grammar
            return Guess(NONE, float(p[self.intents.index(NONE)]) if NONE in self.intents else 0.0, True)
        return Guess(intent, probability, probability >= self.sure)

    def _novel(self, sentence: np.ndarray | None, intent: int) -> bool:
        """Whether a request's MiniLM vectors (a row each) are all nearer no example of `intent` than `novel`:
        words misheard into nothing ("Then pre-chalp.") that the classifier still places, far from anything it
        learnt."""
        vectors, labels = self._examples
        if not self.novel or sentence is None or vectors is None:
            return False
        return float((vectors[labels == intent] @ sentence.T).max()) < self.novel

    def _unlike_its_examples(self, text: str, sentence: np.ndarray | None, intent: int) -> bool:
        """Whether a heard request is near no example of `intent`: as a whole, nor (`near_in_clauses`) in any
        of its clauses."""
        if not self._novel(sentence, intent):
            return False
        parts = self._clauses(text) if self.near_in_clauses else None
        return parts is None or self._novel(parts, intent)

    def _read_clauses(self, text: str) -> np.ndarray | None:
        """MiniLM's vectors of a request's clauses, where it has more than one, for `_clauses` to keep."""
        parts = clauses(text)
        return self._sentence(parts) if len(parts) > 1 else None
