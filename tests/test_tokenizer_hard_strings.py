"""The hard strings shipped with the tokenizer (``hard_strings.json``): built by ``build()``.

The fast backend must give the reference's ids on every one of them before it is used in a
process (``openwebtext.tokenizer.exactness``). This file is where they come from: the shipped
JSON must equal ``build()`` (rewrite it with ``python tests/test_tokenizer_hard_strings.py``),
each class must be there, and the whole set stays small enough to check at every load.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from openwebtext.tokenizer.exactness import HARD_STRINGS_FILE, hard_strings

ABOUT = (
    "Strings on which a fast tokenizer backend must give the reference's ids before it is "
    "used (openwebtext.tokenizer.exactness). Built by tests/test_tokenizer_hard_strings.py; "
    "do not edit by hand."
)

#: Unicode spaces and other whitespace-like characters (``\s`` in Python and in Rust differ on
#: some of them, which is the point).
SPACES = (
    "\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\u0085\x0b\x0c\x1c\x1d\x1e\x1f\u180e"
)
WORDS = ("word", "Hello", "x", "1", "!", "é", "東京", "🙂")


def _whitespace_runs() -> list[str]:
    out = []
    for n in (1, 2, 3, 4, 7, 8, 15, 16, 31, 64, 100, 255, 256, 1000, 2047, 4096):
        out += [" " * n, "a" + " " * n + "b", " " * n + "x", "x" + " " * n]
    for n in (2, 3, 10, 300, 3000):
        out += ["\n" * n, "\t" * n, "x" + "\n" * n + "y", " \n" * n, "\t " * n + "z"]
    out += ["  \n  \n\n   \t\t x", "a \t b\t\tc", " \u00a0 ", "\n \n", "   \n", " " * 5000 + "!"]
    return out


def _crlf() -> list[str]:
    return [
        "line one\r\nline two\r\n",
        "\r\n" * 50,
        "a\r\r\nb",
        "a \r\n b",
        "\r\n\r\n\r\nx",
        "x\r",
        "\r",
        "\n\r",
        "end.\r\n  indented\r\n\tTab",
        " \r\n" * 200 + "x",
    ]


def _unicode_spaces() -> list[str]:
    out = []
    for ch in SPACES:
        out += [f"a{ch}b", f"{ch}word", f"word{ch}", ch * 3 + "x", f" {ch} {ch}1"]
    out += [SPACES, SPACES * 20, " ".join(SPACES), "x" + SPACES + "y"]
    return out


def _contractions() -> list[str]:
    out = []
    for suffix in ("s", "t", "re", "ve", "m", "ll", "d"):
        out += [f"it'{suffix}", f"IT'{suffix.upper()}", f"It'{suffix.upper()} x", f"'{suffix}"]
    out += [
        "don't DON'T Don'T dOn't",
        "we've WE'VE we'Ve",
        "''s '''",
        "'S'T'RE'VE'M'LL'D",
        "rock 'n' roll",
        "it’s curly’s",
        "'s's's's",
        "l'homme d'Arc",
        "x'",
        "'",
    ]
    return out


def _digits() -> list[str]:
    return [
        "0",
        "1234567890",
        "3.14159265358979",
        "1,000,000.00",
        " 2024 ",
        "0x1F 0b1010 1e-9",
        "9" * 100,
        "a1b2c3",
        "12ab34",
        "v1.2.3-rc4",
        "1\u00a02",
        "2²³ ½ ⅓ ¼ Ⅻ ⅻ ①②",
        "１２３ fullwidth",
        "𝟘𝟙𝟚 𝟡",
    ]


def _arabic_indic_digits() -> list[str]:
    return [
        "٠١٢٣٤٥٦٧٨٩",
        "۰۱۲۳۴۵۶۷۸۹",
        "रु १२३४",
        "৩৪৫ ௧௨௩ ๑๒๓",
        "العدد ٣٤٥ هنا",
        " ٣" * 30,
    ]


def _cjk_and_hangul() -> list[str]:
    return [
        "東京タワーへ行きました。",
        "我们在北京吃了烤鸭",
        "ひらがなカタカナー",
        "漢字かな交じり文、句読点。",
        "𠀀𠀁𠜎𪚥 𫝀",
        "안녕하세요 세계",
        "한국어 한",
        "ㄱㄴㄷ ㅏㅑ",
        "日本語English混合テキスト123",
        "（全角括弧）「引用」",
        "東" * 500,
    ]


def _emoji() -> list[str]:
    return [
        "🙂👍🏽",
        "👨‍👩‍👧‍👦",
        "🏳️‍🌈 🏴‍☠️",
        "🇫🇷🇯🇵🇺🇸",
        "1️⃣ #️⃣ *️⃣",
        "❤️ ❤ ✨",
        "👩🏾‍💻 🧑‍🤝‍🧑",
        "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
        "text🙂text 🙂 text",
        "🙂" * 300,
        "\u200d" * 5 + "🙂",
    ]


def _combining_marks() -> list[str]:
    return [
        "e\u0301 e\u0301\u0302\u0303",
        "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
        "שָׁלוֹם",
        "नमस्ते दुनिया",
        "ภาษาไทย",
        "\u0301start",
        " \u0301 \u0308",
        "a" + "\u0300" * 200,
        "Ελληνικά ἀρχή",
        "Tiếng Việt",
    ]


def _invisible() -> list[str]:
    return [
        "\ufeff",
        "\ufeffBOM first",
        "zero\u200bwidth\u200bspace",
        "\u200c\u200d\u2060\u00ad",
        "soft\u00adhyphen",
        " \u200b ",
        "\u200b" * 100,
        "\u2066isolate\u2069 \u202eRTL\u202c",
    ]


def _control_characters() -> list[str]:
    low = "".join(chr(i) for i in range(32))
    return [
        low,
        "a\x00b",
        "\x00" * 10,
        "x\x7fy",
        "".join(chr(i) for i in range(0x80, 0xA0)),
        "bell\x07 esc\x1b[31m red\x1b[0m",
        "\x08\x08back",
        " \x00 \x01 ",
    ]


def _special_token_text() -> list[str]:
    return [
        "<|endoftext|>",
        "one<|endoftext|>two",
        "<|endoftext|><|endoftext|>",
        " <|endoftext|> ",
        "<|endoftext",
        "< |endoftext|>",
        "<|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|>",
        "<|im_start|>user<|im_end|>",
        "</s> <s> <pad> [SEP] [CLS] <eos> <unk>",
    ]


def _ligatures() -> list[str]:
    return ["ﬁnance ﬂow ﬀ ﬃ ﬄ ﬅ ﬆ", "Æsir œuvre Ĳ", "ǅemal ǈ ǋ", "ß ẞ straße", "İstanbul ı"]


def _astral() -> list[str]:
    return [
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕳𝖊𝖑𝖑𝖔",
        "𐍈𐌰𐌽𐍃",
        "🀄🃏",
        "\U000e0041\U000e0042",
        "\ue000\uf8ff",
        "\U000f0000\U0010fffd",
        "\uffff\ufffe\U0010ffff",
        "𓀀𓀁 𒀀",
        "\ufffd replacement",
    ]


def _mixed() -> list[str]:
    return [
        "",
        "Hello world",
        "The quick brown fox jumps over the lazy dog. It's 2024!",
        "def f(x):\n    return x ** 2  # square\n\n\tif x:\n\t\tpass\n",
        '<html><body><p class="x">Hi &amp; bye</p></body></html>',
        '{"key": [1, 2.5, "three"], "nested": {"a": null}}',
        "https://example.com/path?q=1&r=two#frag someone@example.org",
        "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=" * 10,
        "!!!???...---___===+++***" * 40,
        "a" * 3000,
        "Grüße aus Köln — naïve café, 東京タワー, Ελληνικά, emoji 🙂👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢.",
        "lone \ud800 surrogate \udfff",
        "Ƀ ʰ ˆ ー 々 〻",
        "abc日本def한국ghi",
        "Привет, мир! Բարեւ ქართული ሰላም",
    ]


BUILDERS = {
    "whitespace runs": _whitespace_runs,
    "CRLF": _crlf,
    "Unicode spaces": _unicode_spaces,
    "contractions": _contractions,
    "digits": _digits,
    "Arabic-Indic and other digits": _arabic_indic_digits,
    "CJK and Hangul": _cjk_and_hangul,
    "emoji and ZWJ sequences": _emoji,
    "combining marks": _combining_marks,
    "BOM, ZWSP and other invisible characters": _invisible,
    "control characters": _control_characters,
    "special tokens' text": _special_token_text,
    "ligatures and case": _ligatures,
    "astral planes": _astral,
    "mixed": _mixed,
}


def build() -> dict[str, object]:
    """What ``hard_strings.json`` holds: an explanation and the strings by class."""
    return {"about": ABOUT, "classes": {name: make() for name, make in BUILDERS.items()}}


def _dump(content: dict[str, object]) -> str:
    return json.dumps(content, indent=1) + "\n"  # ASCII: \u escapes keep every code point


def test_the_shipped_file_is_what_build_makes() -> None:
    assert Path(HARD_STRINGS_FILE).read_text(encoding="ascii") == _dump(build())


def test_every_class_is_there_and_the_set_is_small() -> None:
    strings = hard_strings()
    classes = {cls for cls, _ in strings}
    assert classes == set(BUILDERS)
    assert 300 <= len(strings) <= 600
    assert sum(len(text) for _, text in strings) < 200_000
    assert any(len(text) >= 4096 and not text.strip() for _, text in strings)
    assert any("<|endoftext|>" in text for _, text in strings)


if __name__ == "__main__":
    Path(HARD_STRINGS_FILE).write_text(_dump(build()), encoding="ascii")
    print(f"wrote {HARD_STRINGS_FILE}", file=sys.stderr)
