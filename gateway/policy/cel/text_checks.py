"""What a reader of a text does not see, and the text as a reader sees it: CEL functions for both engines.

    hiddenChars(s)   the invisible and format characters in ``s``, each once, as "U+200B", in order
    foldText(s)      ``s`` for phrase matching: hidden characters and accents dropped, compatibility
                     forms (full-width, ligatures) and Cyrillic or Greek look-alikes made Latin, case
                     folded, every run of white space one space

Both are for text a model reads and a person may not: tool descriptions above all, where tool-poisoning
attacks hide instructions in Unicode tag characters, zero-width characters or bidi controls
(policies/tool-poisoning/). The table of hidden characters is written out here rather than taken from
Python's Unicode database, so the answer is the same on every Python version.
"""

# The look-alike letters of other scripts below are the point of this module.
# ruff: noqa: RUF001

from __future__ import annotations

import functools
import re
import unicodedata

import re2

__all__ = ["HIDDEN_RANGES", "fold_text", "hidden_chars"]

# (first, last, what): Unicode's Default_Ignorable_Code_Point set, which renders as nothing, less VS15 and VS16
# (U+FE0E, U+FE0F: text or emoji presentation, common after emoji), plus the control characters but tab, LF, CR.
HIDDEN_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x0000, 0x0008, "control characters"),
    (0x000B, 0x000C, "control characters"),
    (0x000E, 0x001F, "control characters"),
    (0x007F, 0x009F, "delete and C1 control characters"),
    (0x00AD, 0x00AD, "soft hyphen"),
    (0x034F, 0x034F, "combining grapheme joiner"),
    (0x061C, 0x061C, "Arabic letter mark (bidi)"),
    (0x115F, 0x1160, "Hangul fillers"),
    (0x17B4, 0x17B5, "Khmer inherent vowels"),
    (0x180B, 0x180F, "Mongolian variation selectors and vowel separator"),
    (0x200B, 0x200D, "zero-width space, non-joiner and joiner"),
    (0x200E, 0x200F, "left-to-right and right-to-left marks (bidi)"),
    (0x202A, 0x202E, "bidi embeddings and overrides"),
    (0x2060, 0x2064, "word joiner and invisible operators"),
    (0x2065, 0x2065, "reserved, default ignorable"),
    (0x2066, 0x2069, "bidi isolates"),
    (0x206A, 0x206F, "deprecated format characters"),
    (0x3164, 0x3164, "Hangul filler"),
    (0xFE00, 0xFE0D, "variation selectors 1-14"),
    (0xFEFF, 0xFEFF, "zero-width no-break space (byte order mark)"),
    (0xFFA0, 0xFFA0, "half-width Hangul filler"),
    (0xFFF0, 0xFFF8, "reserved, default ignorable"),
    (0xFFF9, 0xFFFB, "interlinear annotation controls"),
    (0x1BCA0, 0x1BCA3, "shorthand format controls"),
    (0x1D173, 0x1D17A, "musical symbol format controls"),
    (0xE0000, 0xE007F, "Unicode tag characters"),
    (0xE0080, 0xE00FF, "reserved, default ignorable"),
    (0xE0100, 0xE01EF, "variation selectors 17-256"),
    (0xE01F0, 0xE0FFF, "reserved, default ignorable"),
)
_ZWJ = 0x200D
# A policy reads the same tool text on every call of the tool, and several rules read it: both functions remember
# their answers for texts up to _CACHED_CHARS (256 of them: a flood of large values cannot grow memory past ~16 MB).
_CACHED_CHARS = 8192
# In ASCII text only control characters can be hidden; a small class scans many times faster than the whole table.
_ASCII_HIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_HIDDEN = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b, _ in HIDDEN_RANGES) + "]")
# The hidden characters and the combining marks (accents, which NFKD splits off), dropped in one pass.
_DROPPED = re2.compile("[" + "".join(f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b, _ in HIDDEN_RANGES) + "\\p{Mn}]+")
# Letters of other scripts that look like Latin ones, after case folding (so upper-case look-alikes too).
_LOOK_ALIKES = str.maketrans({
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "һ": "h", "н": "h", "і": "i", "ј": "j", "к": "k", "ӏ": "l",
    "м": "m", "о": "o", "р": "p", "ԛ": "q", "ѕ": "s", "т": "t", "ԝ": "w", "х": "x", "у": "y", "ԁ": "d", "с": "c",
    # Greek
    "α": "a", "β": "b", "ε": "e", "ζ": "z", "η": "h", "ι": "i", "κ": "k", "μ": "m", "ν": "n", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "y", "χ": "x",
    # Latin letters that read as others
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɡ": "g", "ɩ": "i", "ʟ": "l",
})


def hidden_chars(text: str) -> list[str]:
    """Each hidden character of ``text`` once, as ``U+XXXX``, in the order first seen.

    A zero-width joiner between two emoji (``👩‍💻``) is how emoji are composed and is not reported.
    """
    if len(text) > _CACHED_CHARS:
        return list(_hidden_chars.__wrapped__(text))
    return list(_hidden_chars(text))


@functools.lru_cache(maxsize=256)
def _hidden_chars(text: str) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for match in (_ASCII_HIDDEN if text.isascii() else _HIDDEN).finditer(text):
        code = ord(match.group())
        if code == _ZWJ and _joins_emoji(text, match.start()):
            continue
        found.setdefault(f"U+{code:04X}", None)
    return tuple(found)


def _joins_emoji(text: str, at: int) -> bool:
    return 0 < at < len(text) - 1 and _is_emoji(text[at - 1]) and _is_emoji(text[at + 1])


def _is_emoji(char: str) -> bool:
    # the blocks emoji come from (pictographs, dingbats, symbols), and VS16 ending an emoji before the joiner
    code = ord(char)
    return 0x1F000 <= code <= 0x1FAFF or 0x2300 <= code <= 0x27BF or 0x2B00 <= code <= 0x2BFF or code == 0xFE0F


def fold_text(text: str) -> str:
    """``text`` as phrase rules should read it: full-width "IGNORE", a zero-width space and "prévious" read
    ``"ignore previous"``."""
    return _fold_text(text) if len(text) <= _CACHED_CHARS else _fold_text.__wrapped__(text)


@functools.lru_cache(maxsize=256)
def _fold_text(text: str) -> str:
    if not text.isascii():
        text = _DROPPED.sub("", unicodedata.normalize("NFKD", text))
        text = text.casefold().translate(_LOOK_ALIKES)
    else:
        text = _ASCII_HIDDEN.sub("", text).lower()
    return " ".join(text.split())
