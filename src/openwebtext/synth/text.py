"""Documents: :func:`generate_document` and :func:`member_documents`.

The text is made of a deterministic made-up vocabulary (syllable words behind a
skeleton of real English function words) drawn with a Zipf-like law, cut into sentences
and paragraphs, with numbers, dates, URLs, quotes, a title, web boilerplate and some
non-ASCII (curly quotes, dashes, accented and non-Latin words). It compresses under xz
about as well as real web text (about 3x) and its document lengths are right-skewed
like the real corpus (mean about 4.7 KB, median about 3 KB).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from openwebtext.synth.draw import Draw, IntArray, cumulative, normal, pick, uniform
from openwebtext.synth.words import (
    FOOTERS,
    FOREIGN,
    HEADERS,
    MONTHS,
    SUCC,
    SUCC_WEIGHTS,
    TLDS,
    WEEKDAYS,
    Vocab,
    vocabulary,
)

# Document length in UTF-8 bytes: lognormal, clamped.
_LEN_MEDIAN = 2880.0
_LEN_SIGMA = 0.97
_MIN_DOC_BYTES = 350
_MAX_DOC_BYTES = 100_000

_SENTENCE_MIN = 4
_SENTENCE_EXTRA_MEAN = 14.0  # sentence length = 4 + exponential(14) words, capped
_SENTENCE_MAX = 70
_PARAGRAPH_EXTRA_MEAN = 2.5  # sentences per paragraph = 1 + exponential(2.5), capped
_PARAGRAPH_MAX = 12
_TOPIC_RATE = 0.1  # words drawn from the document's topic words
_TOPIC_MIN_RANK = 200  # topic words are content words
_SUCC_CUM = cumulative(SUCC_WEIGHTS)
_FOLLOW_RATE = 0.63  # words that are their predecessor's usual successor
_CHAIN_MAX = 8
_COMMA_RATE = 0.07
_DASH_RATE = 0.08  # share of commas drawn as dashes
_QUESTION_RATE = 0.04
_EXCLAIM_RATE = 0.015
_QUOTE_RATE = 0.07  # sentences in quotes
_SPECIAL_RATE = 0.018  # words replaced by numbers, dates, ...
_URL_RATE = 0.2  # documents with URLs in the text
_TYPOGRAPHIC_RATE = 0.15  # documents with curly quotes and em dashes
_FOREIGN_RATE = 0.04  # documents with a few non-Latin words
_HEADER_RATE = 0.3
_FOOTER_RATE = 0.5
_AD_BREAK_RATE = 0.03  # "Advertisement" lines between paragraphs

# How the markers left in the text are drawn: plain ASCII or typographic.
_ASCII_MARKS = (("\x01", '"'), ("\x02", '"'), ("\x03", " --"))
_TYPO_MARKS = (("\x01", "“"), ("\x02", "”"), ("\x03", " —"), ("'", "’"))


def _word(draw: Draw, vocab: Vocab) -> str:
    """One word with Zipf frequency."""
    cum = vocab.cum_list
    i = min(bisect.bisect_right(cum, draw() * cum[-1]), vocab.size - 1)
    return vocab.words[i]


def _name(draw: Draw, vocab: Vocab) -> str:
    """A capitalised content word (never a function word), e.g. for names."""
    cum = vocab.cum_list
    lo = cum[_TOPIC_MIN_RANK]
    i = min(bisect.bisect_right(cum, lo + draw() * (cum[-1] - lo)), vocab.size - 1)
    return vocab.cap_words[i]


def _date(draw: Draw) -> str:
    month = draw.choice(MONTHS)
    day = 1 + draw.below(28)
    year = 1995 + draw.below(25)
    return f"{month} {day}, {year}"


def _special(draw: Draw, vocab: Vocab) -> str:
    """A number, date, amount, percentage, time or name."""
    u = draw()
    if u < 0.25:
        return str(1 + int(math.exp(draw() * 7.0)))
    if u < 0.40:
        return str(1990 + draw.below(30))
    if u < 0.50:
        return f"{draw() * 100:.1f}%" if draw() < 0.5 else f"{1 + draw.below(99)} percent"
    if u < 0.60:
        amount = math.exp(draw() * 9.0)
        if draw() < 0.5:
            return f"${amount:,.0f}"
        return f"${amount / 100:.1f} {'million' if draw() < 0.7 else 'billion'}"
    if u < 0.72:
        return _date(draw)
    if u < 0.78:
        return f"{1 + draw.below(12)}:{draw.below(60):02d} {'a.m.' if draw() < 0.5 else 'p.m.'}"
    if u < 0.84:
        return draw.choice(WEEKDAYS)
    if u < 0.90:
        return f"{1 + draw.below(999):,}"
    return f"{_name(draw, vocab)} {_name(draw, vocab)}"


def _url(draw: Draw, vocab: Vocab) -> str:
    host = (_name(draw, vocab) + _name(draw, vocab)).lower()
    host = "".join(ch for ch in host if ch.isascii() and ch.isalnum()) or "example"
    tld = draw.choice(TLDS)
    scheme = "https" if draw() < 0.7 else "http"
    www = "www." if draw() < 0.6 else ""
    if draw() < 0.3:
        return f"{scheme}://{www}{host}.{tld}"
    slug = "-".join(
        "".join(ch for ch in _word(draw, vocab).lower() if ch.isascii() and ch.isalnum())
        for _ in range(2 + draw.below(5))
    )
    path = f"{1995 + draw.below(25)}/{1 + draw.below(12):02d}/{slug}"
    return f"{scheme}://{www}{host}.{tld}/{path}"


def _fill(template: str, draw: Draw, vocab: Vocab) -> str:
    return template.format(
        year=1995 + draw.below(25),
        Name=_name(draw, vocab),
        name=_name(draw, vocab).lower(),
    )


def _sentences(
    rng: np.random.Generator, vocab: Vocab, topic: IntArray, n: int
) -> tuple[IntArray, IntArray, IntArray]:
    """About ``n`` words in whole sentences: token ids, forms and sentence ends."""
    base = vocab.zipf(uniform(rng, n))
    # Burstiness: a document keeps coming back to its own topic words (the first ones
    # most often).
    ut = uniform(rng, n)
    which = np.minimum((len(topic) * (ut / _TOPIC_RATE) ** 2).astype(np.intp), len(topic) - 1)
    base = np.where(ut < _TOPIC_RATE, topic[which], base)
    # Collocations: a word is often followed by one of its usual successors; runs of
    # followers make fixed phrases (followed exactly for up to _CHAIN_MAX words).
    uf = uniform(rng, n - 1)
    at = np.flatnonzero(uf < _FOLLOW_RATE) + 1
    col = pick(_SUCC_CUM, uf[at - 1] / _FOLLOW_RATE)
    for _ in range(_CHAIN_MAX):
        base[at] = vocab.succ[base[at - 1] * SUCC + col]
    n_sent = n // _SENTENCE_MIN + 1
    extra = np.floor(-np.log1p(-uniform(rng, n_sent)) * _SENTENCE_EXTRA_MEAN)
    sent_len = np.minimum(_SENTENCE_MIN + extra.astype(np.intp), _SENTENCE_MAX)
    ends: IntArray = np.cumsum(sent_len)
    n_sent = max(int(np.searchsorted(ends, n, side="right")), 1)  # whole sentences
    ends = ends[:n_sent] if ends[0] <= n else np.array([n], dtype=np.intp)
    n = int(ends[-1])
    starts = np.concatenate(([0], ends[:-1]))
    form = np.zeros(n, dtype=np.intp)
    u = uniform(rng, n)
    comma = u < _COMMA_RATE
    form[comma] = np.where(u[comma] < _COMMA_RATE * _DASH_RATE, Vocab.DASH, Vocab.COMMA)
    form[starts] = Vocab.CAP
    ue = uniform(rng, len(ends))
    form[ends - 1] = np.where(
        ue < _QUESTION_RATE,
        Vocab.QUESTION,
        np.where(ue < _QUESTION_RATE + _EXCLAIM_RATE, Vocab.EXCLAIM, Vocab.PERIOD),
    )
    tokens: IntArray = base[:n] + vocab.size * form
    return tokens, form, ends


def _body(
    rng: np.random.Generator, draw: Draw, vocab: Vocab, target: int, urls: int, foreign: int
) -> list[str]:
    """Paragraphs of about ``target`` UTF-8 bytes (ends at the first sentence past it)."""
    n_topic = 4 + draw.below(16)
    lo = vocab.cum[_TOPIC_MIN_RANK] / vocab.cum[-1]
    topic = pick(vocab.cum, lo + (1.0 - lo) * uniform(rng, n_topic))
    n = int(target / (0.8 * vocab.mean_nbytes)) + 48  # words: enough but for rare flukes
    while True:
        tokens, form, ends = _sentences(rng, vocab, topic, n)
        size_at_end = np.cumsum(vocab.nbytes[tokens])[ends - 1]
        if size_at_end[-1] >= target:
            break
        n *= 2
    # Cut at the first sentence end where the running size reaches the target.
    n_sent = int(np.searchsorted(size_at_end, target, side="left")) + 1
    n = int(ends[n_sent - 1])
    ends_list: list[int] = ends[:n_sent].tolist()
    starts_list = [0, *ends_list[:-1]]
    words: list[str] = vocab.strings[tokens[:n]].tolist()

    # Numbers, dates, names, URLs and non-Latin words replace plain mid-sentence words.
    plain = (form[:n] == Vocab.PLAIN) & (uniform(rng, n) < _SPECIAL_RATE)
    for i in np.flatnonzero(plain).tolist():
        words[i] = _special(draw, vocab)
    for _ in range(urls):
        i = draw.below(n)
        if form[i] == Vocab.PLAIN:
            words[i] = _url(draw, vocab)
    for _ in range(foreign):
        i = draw.below(n)
        if form[i] == Vocab.PLAIN:
            words[i] = draw.choice(FOREIGN)
    # Quoted sentences: \x01 and \x02 become straight or curly quotes later.
    for s in np.flatnonzero(uniform(rng, n_sent) < _QUOTE_RATE).tolist():
        words[starts_list[s]] = "\x01" + words[starts_list[s]]
        words[ends_list[s] - 1] += "\x02"

    # Paragraphs of 1 + exponential sentences.
    paragraphs: list[str] = []
    s = 0
    while s < n_sent:
        k = min(1 + int(-math.log1p(-draw()) * _PARAGRAPH_EXTRA_MEAN), _PARAGRAPH_MAX)
        e = min(s + k, n_sent)
        paragraphs.append(" ".join(words[starts_list[s] : ends_list[e - 1]]))
        if draw() < _AD_BREAK_RATE:
            paragraphs.append("Advertisement")
        s = e
    return paragraphs


def generate_document(rng: np.random.Generator | int, target_bytes: int | None = None) -> str:
    """Generate one synthetic web document.

    Args:
        rng: a ``numpy.random.Generator`` (only its ``random`` method is used), or an int
            seed for a fresh ``Generator(PCG64(seed))``.
        target_bytes: approximate UTF-8 size wanted; by default it is drawn from the
            corpus' lognormal length distribution (mean about 4.7 KB, median about 3 KB,
            clamped to 350 B .. 100 KB).

    Returns:
        The document: a title line, a blank line, optional header boilerplate, paragraphs
        separated by blank lines, optional footer boilerplate, ending with a newline.
    """
    if isinstance(rng, int):
        rng = np.random.Generator(np.random.PCG64(rng))
    vocab = vocabulary()
    draw = Draw(rng)
    if target_bytes is None:
        size = _LEN_MEDIAN * math.exp(_LEN_SIGMA * normal(rng))
        target_bytes = int(min(max(size, _MIN_DOC_BYTES), _MAX_DOC_BYTES))
    typographic = draw() < _TYPOGRAPHIC_RATE
    urls = 1 + draw.below(3) if draw() < _URL_RATE else 0
    foreign = 1 + draw.below(4) if draw() < _FOREIGN_RATE else 0

    title_n = 3 + draw.below(10)
    title_ids = vocab.zipf(uniform(rng, title_n)).tolist()
    title = " ".join(vocab.cap_words[i] for i in title_ids)
    if draw() < 0.15:
        title += " - " + _name(draw, vocab)

    head: list[str] = []
    if draw() < _HEADER_RATE:
        if draw() < 0.6:
            head.append(draw.choice(HEADERS))
        if draw() < 0.5:
            head.append(f"By {_name(draw, vocab)} {_name(draw, vocab)}")
        if draw() < 0.5:
            head.append(_date(draw))
    foot: list[str] = []
    if draw() < _FOOTER_RATE:
        for _ in range(1 + draw.below(4)):
            foot.append(_fill(draw.choice(FOOTERS), draw, vocab))
    frame = [title, *(["\n".join(head)] if head else []), *(["\n".join(foot)] if foot else [])]
    used = sum(len(p.encode()) + 2 for p in frame)
    body_target = max(target_bytes - used, 100)
    body_target = min(body_target, _MAX_DOC_BYTES - used - 2_000)
    paragraphs = _body(rng, draw, vocab, body_target, urls, foreign)
    while True:
        parts = [title, *(["\n".join(head)] if head else []), *paragraphs]
        if foot:
            parts.append("\n".join(foot))
        text = "\n\n".join(parts) + "\n"
        for mark, drawn in _TYPO_MARKS if typographic else _ASCII_MARKS:
            text = text.replace(mark, drawn)
        if len(paragraphs) <= 1 or len(text.encode()) <= _MAX_DOC_BYTES:
            return text
        paragraphs.pop()  # rare: past the cap after numbers, URLs and quotes went in


def _member_rng(seed: int, subset: int, member: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, subset, member])))


def member_documents(seed: int, subset: int, member: int, docs: int) -> list[str]:
    """The ``docs`` document texts of member ``member`` (from 1) of subset ``subset``.

    Each member has its own random stream (``SeedSequence([seed, subset, member])``), so
    members can be generated independently and in any order.
    """
    rng = _member_rng(seed, subset, member)
    return [generate_document(rng) for _ in range(docs)]
