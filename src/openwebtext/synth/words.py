"""The fixed vocabulary (part of the generator, not of the seed) and the word lists and
boilerplate lines documents draw from."""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from openwebtext.synth.draw import Draw, FloatArray, IntArray, cumulative, pick, uniform


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _table(text: str) -> tuple[tuple[str, float], ...]:
    """Parse ``"item:weight ..."`` (``-`` is the empty string) into pairs."""
    pairs = (entry.rsplit(":", 1) for entry in text.split())
    return tuple((("" if item == "-" else item), float(weight)) for item, weight in pairs)


_VOCAB_SEED = 0x0E5B_7E47
_VOCAB_SIZE = 40_000  # total words, function words included
_ZIPF_S = 1.0  # Zipf-Mandelbrot exponent
_ZIPF_Q = 2.7  # Zipf-Mandelbrot offset
_PROPER_RATE = 0.08  # made-up words that are names, always capitalised
_ACCENT_RATE = 0.001  # rare made-up words with an accented letter
_ACCENT_MIN_RANK = 3000
SUCC_WEIGHTS = (0.5, 0.25, 0.15, 0.1)  # how often each of a word's successors follows it
SUCC = len(SUCC_WEIGHTS)

# Real English function words and common words, in rough frequency order; they take the
# top ranks so the text has an English skeleton around made-up content words.
_FUNCTION_WORDS = _words(
    "the of and to a in is that for it was on with as he be at by I this had not are but "
    "from or have an they which one you were her all she there would their we him been "
    "has when who will more no if out so said what up its about into than them can only "
    "other new some could time these two may then do first any my now such like our over "
    "it's don't didn't can't isn't I'm we're they're doesn't won't that's there's you're "
    "I've wasn't he's she's let's couldn't man me even most made after also did many "
    "before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work "
    "long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three "
)

_ONSETS = _table(
    "-:6 b:3 c:2.5 d:3 f:2 g:2 h:2.5 j:0.6 k:1.5 l:3 m:3 n:2.5 p:2.5 r:3 s:3.5 t:3.5 "
    "v:1.2 w:1.8 z:0.5 br:1 cr:0.8 dr:0.8 fr:0.8 gr:0.8 pr:1.2 tr:1.2 bl:0.6 cl:0.7 "
    "fl:0.6 gl:0.4 pl:0.7 sl:0.5 st:1.2 sp:0.6 sk:0.4 sh:1 ch:1 th:1.5 wh:0.5 qu:0.4 "
    "sm:0.3 sn:0.3 sw:0.3 tw:0.3 str:0.4 spr:0.2"
)
_VOWELS = _table("a:6 e:7 i:5 o:5 u:2.5 y:0.6 ai:0.8 ea:1 ee:0.8 ie:0.6 oo:0.7 ou:1 oa:0.4 au:0.4")
_CODAS = _table(
    "-:9 n:3 r:3 s:2 t:2.5 l:2 m:1.2 d:1.5 ck:0.6 ng:0.8 nd:1 nt:1 st:0.7 rt:0.5 "
    "sh:0.4 th:0.4 x:0.2 ss:0.4 ll:0.6 rn:0.3 mp:0.3 ft:0.2 ct:0.3"
)
_SUFFIXES = _table(
    "s:4 ed:2.5 ing:2.5 er:2 ly:1.5 tion:1.5 ment:0.8 ness:0.5 al:1 ic:0.7 ous:0.5 "
    "ive:0.5 able:0.4 ist:0.3 ity:0.5"
)
_SYLLABLES = ((1, 2.0), (2, 4.0), (3, 2.8), (4, 1.2))  # syllables per made-up word
_ACCENTS = {
    "a": "áàäâ",
    "e": "éèëê",
    "i": "íï",
    "o": "óöô",
    "u": "úü",
    "n": "ñ",
    "c": "ç",
}


class Vocab:
    """Token table: every word in every form (plain, comma, capitalised, end of sentence).

    A token id is ``word + size * form``; ``strings[id]`` is its text and ``nbytes[id]``
    its UTF-8 length plus one for the separating space. ``succ[word * SUCC + j]`` are the
    words that often follow it (collocations), ``cum`` the Zipf cumulative weights.
    """

    PLAIN, COMMA, CAP, PERIOD, QUESTION, EXCLAIM, DASH = range(7)
    FORMS = 7

    def __init__(self, words: list[str], proper: list[bool], succ: IntArray) -> None:
        self.words = words
        self.succ = succ  # successors of word w: succ[w * SUCC : (w + 1) * SUCC]
        self.size = len(words)
        self.cap_words = [w[0].upper() + w[1:] for w in words]
        base = [c if p else w for w, c, p in zip(words, self.cap_words, proper, strict=True)]
        # By form: plain, comma, capitalised, period, question, exclamation, dash (\x03
        # marks a dash; the document's style decides how it is drawn).
        flat = [*base, *[b + "," for b in base], *self.cap_words]
        for mark in ".?!\x03":
            flat += [b + mark for b in base]
        self.strings: npt.NDArray[np.object_] = np.array(flat, dtype=object)
        # UTF-8 size plus the separating space; every mark is one ASCII byte.
        base_bytes = np.array([len(b.encode()) for b in base], dtype=np.intp) + 1
        cap_bytes = np.array([len(c.encode()) for c in self.cap_words], dtype=np.intp) + 1
        marked = base_bytes + 1
        self.nbytes: IntArray = np.concatenate(
            [base_bytes, marked, cap_bytes, marked, marked, marked, marked]
        )
        weights = [(rank + _ZIPF_Q) ** -_ZIPF_S for rank in range(1, self.size + 1)]
        self.cum = cumulative(weights)
        self.cum_list: list[float] = self.cum.tolist()
        self.alias_prob, self.alias_idx = _alias_table(weights)
        self.mean_nbytes = float(np.dot(weights, self.nbytes[: self.size])) / sum(weights)

    def zipf(self, u: FloatArray) -> IntArray:
        """Word ids with Zipf frequencies, one per uniform in ``u`` (alias method)."""
        x = u * self.size
        i = x.astype(np.intp)
        out: IntArray = np.where(x - i < self.alias_prob[i], i, self.alias_idx[i])
        return out


def _alias_table(weights: Sequence[float]) -> tuple[FloatArray, IntArray]:
    """Vose's alias table: draw ``i = floor(u n)``, keep it if ``frac(u n) < prob[i]``,
    else take ``alias[i]``. Plain float arithmetic, so identical on every machine."""
    n = len(weights)
    total = math.fsum(weights)
    scaled = [w * n / total for w in weights]
    prob = [1.0] * n
    alias = list(range(n))
    small = [i for i, p in enumerate(scaled) if p < 1.0]
    large = [i for i, p in enumerate(scaled) if p >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s] = scaled[s]
        alias[s] = g
        scaled[g] = (scaled[g] + scaled[s]) - 1.0
        (small if scaled[g] < 1.0 else large).append(g)
    return np.array(prob, dtype=np.float64), np.array(alias, dtype=np.intp)


def _weighted(table: Sequence[tuple[Any, float]]) -> tuple[list[Any], FloatArray]:
    return [item for item, _ in table], cumulative([w for _, w in table])


@functools.cache
def vocabulary() -> Vocab:
    """Build the fixed vocabulary (deterministic, about half a second, cached per process)."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(_VOCAB_SEED)))
    tables = {
        "onset": _weighted(_ONSETS),
        "vowel": _weighted(_VOWELS),
        "coda": _weighted(_CODAS),
        "suffix": _weighted(_SUFFIXES),
        "syl": _weighted(_SYLLABLES),
    }
    draw = Draw(rng)
    cum_lists = {k: cum.tolist() for k, (_, cum) in tables.items()}

    def choose(name: str) -> Any:
        items, _ = tables[name]
        cum = cum_lists[name]
        return items[min(bisect.bisect_right(cum, draw() * cum[-1]), len(items) - 1)]

    seen = {w.lower() for w in _FUNCTION_WORDS}
    made: list[tuple[float, str]] = []
    target = _VOCAB_SIZE - len(_FUNCTION_WORDS)
    while len(made) < target:
        n_syl: int = choose("syl")
        word = "".join(choose("onset") + choose("vowel") + choose("coda") for _ in range(n_syl))
        if draw() < 0.3:
            word += choose("suffix")
        if len(word) < 2 or word in seen:
            continue
        seen.add(word)
        # Short words tend to be frequent, with plenty of noise.
        made.append((len(word) + 6.0 * draw(), word))
    made.sort()
    words = list(_FUNCTION_WORDS)
    proper = [False] * len(words)
    for rank, (_, word) in enumerate(made):
        u_proper, u_accent, u_pos, u_mark = (draw() for _ in range(4))
        if rank > _ACCENT_MIN_RANK and u_accent < _ACCENT_RATE:
            spots = [i for i, ch in enumerate(word) if ch in _ACCENTS]
            if spots:
                i = spots[int(u_pos * len(spots))]
                marks = _ACCENTS[word[i]]
                word = word[:i] + marks[int(u_mark * len(marks))] + word[i + 1 :]
        words.append(word)
        proper.append(rank > 100 and u_proper < _PROPER_RATE)
    # Successors: any word after a content word ("gro of"), a content word after a
    # function word ("the gro", never "the of").
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    cum = np.cumsum((ranks + _ZIPF_Q) ** -_ZIPF_S)
    u = uniform(rng, SUCC * len(words))
    n_func = SUCC * len(_FUNCTION_WORDS)
    lo = cum[len(_FUNCTION_WORDS) - 1] / cum[-1]
    u[:n_func] = lo + (1.0 - lo) * u[:n_func]
    return Vocab(words, proper, pick(cum, u))


# What documents draw from besides the vocabulary: dates, URLs, non-Latin words, boilerplate.
MONTHS = _words(
    "January February March April May June July August September October November December"
)
WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
TLDS = ("com", "com", "com", "org", "net", "co.uk", "io", "de")

FOREIGN = _words(
    "Москва правда новости Россия спасибо Ελλάδα δημοκρατία λόγος 東京 中国 日本語 北京 "
    "한국 서울 שלום العربية नमस्ते ไทย José Müller São Zürich café naïve résumé Beyoncé "
    "Pokémon Québec Ángel Gómez Bogotá Kraków Dvořák Ørsted"
)

HEADERS = (
    "Advertisement",
    "Skip to main content",
    "Skip to content",
    "Toggle navigation",
    "Menu",
    "Home » News",
    "Breaking News",
    "Log in or sign up",
)
FOOTERS = (
    "Share this article",
    "Share on Facebook",
    "Share on Twitter",
    "Click here to subscribe to our newsletter.",
    "Follow us on Twitter and Facebook for the latest updates.",
    "Sign up for our daily newsletter to get the top stories delivered to your inbox.",
    "Related Articles",
    "Read more:",
    "Advertisement",
    "Comments",
    "Leave a Reply",
    "Your email address will not be published. Required fields are marked *",
    "We use cookies to ensure that we give you the best experience on our website.",
    "Image copyright Getty Images",
    "Report a typo",
    "Like this story? Share it with a friend!",
    "Want more stories like this? Subscribe now.",
    "Have a tip? Send it to us.",
    "Copyright © {year} {Name} Media. All rights reserved.",
    "This article was originally published on {Name}.",
    "Posted in {Name} | Tagged {Name}, {name}",
)
