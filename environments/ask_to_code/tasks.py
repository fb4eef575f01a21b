"""The ask_to_code task bank: short, underspecified coding requests with a hidden specification.

Each task has requirements the user only reveals when asked (matched by keywords), hidden test cases that
depend on those requirements, a reference solution (must pass every case) and the "naive" solution a
model would write without asking (must fail at least one) — the tests in tests/unit/envs check both.

The hidden tests are data — (function, arguments, expected value or expected exception) checks grouped into
named cases, a case passing when all its checks do — so the sandboxed program only ever receives the
arguments, and the judge (``mtrl.sandbox.judge``), outside the sandbox, compares (``run_cases``).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from mtrl.sandbox import Case, Check, Raises


@dataclass(frozen=True)
class Requirement:
    keywords: tuple[str, ...]  # lowercase word stems that show a question is about this requirement
    answer: str


@dataclass(frozen=True)
class Task:
    task_id: str
    prompt: str
    requirements: tuple[Requirement, ...]
    cases: tuple[Case, ...]
    solution: str
    naive: str


def _r(keywords: str, answer: str) -> Requirement:
    return Requirement(tuple(keywords.split()), answer)


def _c(call: str, args: tuple[Any, ...], expected: Any) -> Check:
    """``call(*args)`` must return ``expected`` (exact types, recursively)."""
    return Check(call, args, expected)


def _raises(call: str, args: tuple[Any, ...]) -> Check:
    """``call(*args)`` must raise ValueError (or a subclass)."""
    return Check(call, args, Raises("ValueError"))


def _case(name: str, *checks: Check) -> Case:
    return Case(name, checks)


TASKS: tuple[Task, ...] = (
    Task(
        "slugify",
        "Write a Python function `slugify(title)` that turns a title into a URL slug.",
        (
            _r("separator separate dash hyphen underscore join space", "Join words with underscores, not hyphens."),
            _r("long length limit max truncat short", "Slugs are at most 20 characters; cut longer ones."),
            _r("case lower upper capital", "Lowercase everything."),
        ),
        (
            _case("test_basic", _c("slugify", ("Hello World!",), "hello_world")),
            _case("test_spaces_collapse", _c("slugify", ("  A   B ",), "a_b")),
            _case("test_truncated", _c("slugify", ("x" * 30,), "x" * 20)),
        ),
        """import re
def slugify(title):
    words = re.findall(r"[a-z0-9]+", title.lower())
    return "_".join(words)[:20]
""",
        """import re
def slugify(title):
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))
""",
    ),
    Task(
        "median",
        "Write `median(values)` that returns the median of a list of numbers.",
        (
            _r("empty none nothing zero missing", "For an empty list return None."),
            _r("even middle two average pair", "With an even count return the lower of the two middle values."),
        ),
        (
            _case("test_odd", _c("median", ([3, 1, 2],), 2)),
            _case("test_even_lower_middle", _c("median", ([4, 1, 3, 2],), 2)),
            _case("test_empty", _c("median", ([],), None)),
        ),
        """def median(values):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]
""",
        """def median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
""",
    ),
    Task(
        "word_count",
        "Write `word_count(text)` returning a dict of how often each word appears.",
        (
            _r("case upper lower capital", "Count case-insensitively; keys are lowercase."),
            _r("short length small ignore skip minimum", "Ignore words shorter than 3 letters."),
            _r("punctuation symbol comma period apostrophe", "Punctuation is not part of a word."),
        ),
        (
            _case("test_case_insensitive", _c("word_count", ("Cat cat CAT",), {"cat": 3})),
            _case(
                "test_short_words_ignored", _c("word_count", ("a cat is on the mat",), {"cat": 1, "the": 1, "mat": 1})
            ),
            _case("test_punctuation", _c("word_count", ("dog, dog. dog!",), {"dog": 3})),
        ),
        """import re
def word_count(text):
    counts = {}
    for word in re.findall(r"[a-z]+", text.lower()):
        if len(word) >= 3:
            counts[word] = counts.get(word, 0) + 1
    return counts
""",
        """def word_count(text):
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
""",
    ),
    Task(
        "parse_duration",
        "Write `parse_duration(text)` that parses strings like '1h30m' into a duration.",
        (
            _r("unit return seconds minutes result output type", "Return the total as an int number of seconds."),
            _r("day days d", "Support d (days) as well as h, m and s."),
            _r("invalid error bad wrong malformed raise exception", "Raise ValueError for anything malformed."),
        ),
        (
            _case("test_hours_minutes", _c("parse_duration", ("1h30m",), 5400)),
            _case("test_days", _c("parse_duration", ("2d",), 172800)),
            _case("test_invalid", _raises("parse_duration", ("abc",))),
        ),
        """import re
def parse_duration(text):
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    if not re.fullmatch(r"(\\d+[dhms])+", text or ""):
        raise ValueError(text)
    return sum(int(n) * units[u] for n, u in re.findall(r"(\\d+)([dhms])", text))
""",
        """import re
def parse_duration(text):
    units = {"h": 60, "m": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\\d+)([hm])", text))
""",
    ),
    Task(
        "chunk",
        "Write `chunk(items, size)` that splits a list into chunks of the given size.",
        (
            _r("last partial remainder leftover incomplete short pad", "Pad the last chunk with None to full size."),
            _r("zero negative invalid size error raise", "A size below 1 raises ValueError."),
            _r("type tuple list return output", "Return a list of lists."),
        ),
        (
            _case("test_even", _c("chunk", ([1, 2, 3, 4], 2), [[1, 2], [3, 4]])),
            _case("test_padded", _c("chunk", ([1, 2, 3], 2), [[1, 2], [3, None]])),
            _case("test_bad_size", _raises("chunk", ([1], 0))),
        ),
        """def chunk(items, size):
    if size < 1:
        raise ValueError("size must be at least 1")
    out = [list(items[i:i + size]) for i in range(0, len(items), size)]
    if out and len(out[-1]) < size:
        out[-1] += [None] * (size - len(out[-1]))
    return out
""",
        """def chunk(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]
""",
    ),
    Task(
        "is_palindrome",
        "Write `is_palindrome(text)` that tells whether text is a palindrome.",
        (
            _r("case upper lower capital", "Ignore letter case."),
            _r("space punctuation symbol non alphanumeric character ignore", "Ignore anything but letters and digits."),
            _r("empty blank nothing", "An empty string (or one with no letters or digits) is not a palindrome."),
        ),
        (
            _case("test_sentence", _c("is_palindrome", ("A man, a plan, a canal: Panama",), True)),
            _case("test_not", _c("is_palindrome", ("abc",), False)),
            _case("test_empty", _c("is_palindrome", ("",), False), _c("is_palindrome", ("!!",), False)),
        ),
        """def is_palindrome(text):
    chars = [c.lower() for c in text if c.isalnum()]
    return bool(chars) and chars == chars[::-1]
""",
        """def is_palindrome(text):
    return text == text[::-1]
""",
    ),
    Task(
        "flatten",
        "Write `flatten(nested)` that flattens nested lists.",
        (
            _r("depth deep level recursive nested", "Flatten all levels of nesting."),
            _r("tuple tuples other sequence", "Tuples are values: do not flatten them."),
            _r("string strings str text", "Strings are values too, never split into characters."),
        ),
        (
            _case("test_deep", _c("flatten", ([1, [2, [3, [4]]]],), [1, 2, 3, 4])),
            _case("test_tuples_kept", _c("flatten", ([(1, 2), [3]],), [(1, 2), 3])),
            _case("test_strings_kept", _c("flatten", (["ab", ["cd"]],), ["ab", "cd"])),
        ),
        """def flatten(nested):
    out = []
    for item in nested:
        if isinstance(item, list):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out
""",
        """def flatten(nested):
    out = []
    for item in nested:
        if isinstance(item, (list, tuple)):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out
""",
    ),
    Task(
        "format_price",
        "Write `format_price(amount)` that formats a price for display.",
        (
            _r("round rounding nearest cent cents precision", "Round to the nearest 0.05 (half up)."),
            _r("currency symbol dollar sign prefix format", "Prefix with '$' and always show two decimals."),
            _r("negative minus refund", "Negative amounts look like '-$1.25'."),
        ),
        (
            _case("test_rounding", _c("format_price", (1.23,), "$1.25"), _c("format_price", (1.22,), "$1.20")),
            _case("test_two_decimals", _c("format_price", (3,), "$3.00")),
            _case("test_negative", _c("format_price", (-1.24,), "-$1.25")),
        ),
        """from decimal import Decimal, ROUND_HALF_UP
def format_price(amount):
    value = (Decimal(str(abs(amount))) / Decimal("0.05")).quantize(Decimal("1"), rounding=ROUND_HALF_UP)
    text = "$%.2f" % (float(value) * 0.05)
    return ("-" + text) if amount < 0 else text
""",
        """def format_price(amount):
    return "$%.2f" % amount
""",
    ),
    Task(
        "dedupe",
        "Write `dedupe(items)` that removes duplicates from a list.",
        (
            _r("order keep preserve sort first", "Keep the first occurrence and the original order."),
            _r("case upper lower capital string", "Strings that differ only in case are duplicates."),
        ),
        (
            _case("test_order", _c("dedupe", ([3, 1, 3, 2, 1],), [3, 1, 2])),
            _case("test_case", _c("dedupe", (["Apple", "apple", "APPLE", "pear"],), ["Apple", "pear"])),
        ),
        """def dedupe(items):
    seen, out = set(), []
    for item in items:
        key = item.lower() if isinstance(item, str) else item
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out
""",
        """def dedupe(items):
    return list(dict.fromkeys(items))
""",
    ),
    Task(
        "normalize_phone",
        "Write `normalize_phone(text)` that normalises a phone number.",
        (
            _r("format output look style dash result", "Output like '+1-555-123-4567'."),
            _r("country code digits length eleven ten", "Accept 10 digits, or 11 digits starting with 1."),
            _r("invalid error bad wrong raise exception", "Anything else raises ValueError."),
        ),
        (
            _case("test_ten_digits", _c("normalize_phone", ("(555) 123-4567",), "+1-555-123-4567")),
            _case("test_eleven_digits", _c("normalize_phone", ("1 555 123 4567",), "+1-555-123-4567")),
            _case("test_invalid", _raises("normalize_phone", ("12345",))),
        ),
        """def normalize_phone(text):
    digits = "".join(c for c in text if c.isdigit())
    if len(digits) == 11 and digits[0] == "1":
        digits = digits[1:]
    if len(digits) != 10:
        raise ValueError(text)
    return "+1-%s-%s-%s" % (digits[:3], digits[3:6], digits[6:])
""",
        """def normalize_phone(text):
    return "".join(c for c in text if c.isdigit())
""",
    ),
    Task(
        "top_k",
        "Write `top_k(scores, k)` returning the names with the highest scores from a dict.",
        (
            _r("tie ties equal same break order", "Break ties alphabetically by name."),
            _r("large bigger more than fewer exceed k", "If k exceeds the number of names return all of them."),
            _r("return output type list names", "Return a list of names only."),
        ),
        (
            _case("test_ties", _c("top_k", ({"bob": 5, "amy": 5, "cat": 1}, 2), ["amy", "bob"])),
            _case("test_large_k", _c("top_k", ({"a": 1}, 3), ["a"])),
        ),
        """def top_k(scores, k):
    return [name for name, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
""",
        """def top_k(scores, k):
    return sorted(scores, key=scores.get, reverse=True)[:k]
""",
    ),
    Task(
        "caesar",
        "Write `caesar(text, shift)` implementing a Caesar cipher.",
        (
            _r("digit digits number numbers", "Digits rotate too, modulo 10."),
            _r("case upper lower capital", "Keep each letter's case."),
            _r("other punctuation space symbol non", "Everything else stays unchanged."),
        ),
        (
            _case("test_letters", _c("caesar", ("Abc", 1), "Bcd")),
            _case("test_digits_rotate", _c("caesar", ("a9", 2), "c1")),
            _case("test_negative", _c("caesar", ("a, b!", -1), "z, a!")),
        ),
        """def caesar(text, shift):
    out = []
    for c in text:
        if c.islower():
            out.append(chr((ord(c) - 97 + shift) % 26 + 97))
        elif c.isupper():
            out.append(chr((ord(c) - 65 + shift) % 26 + 65))
        elif c.isdigit():
            out.append(str((int(c) + shift) % 10))
        else:
            out.append(c)
    return "".join(out)
""",
        """def caesar(text, shift):
    out = []
    for c in text:
        if c.islower():
            out.append(chr((ord(c) - 97 + shift) % 26 + 97))
        elif c.isupper():
            out.append(chr((ord(c) - 65 + shift) % 26 + 65))
        else:
            out.append(c)
    return "".join(out)
""",
    ),
    Task(
        "merge_intervals",
        "Write `merge_intervals(intervals)` that merges overlapping intervals.",
        (
            _r(
                "touch touching adjacent boundary endpoint share", "Intervals that only touch (end == start) merge too."
            ),
            _r("return output type tuple format sort order", "Return a sorted list of (start, end) tuples."),
        ),
        (
            _case("test_overlap", _c("merge_intervals", ([[5, 7], [1, 3], [2, 4]],), [(1, 4), (5, 7)])),
            _case("test_touching", _c("merge_intervals", ([(1, 2), (2, 3)],), [(1, 3)])),
        ),
        """def merge_intervals(intervals):
    out = []
    for start, end in sorted(tuple(i) for i in intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
""",
        """def merge_intervals(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start < out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out
""",
    ),
    Task(
        "title_case",
        "Write `title_case(text)` that converts a sentence to title case.",
        (
            _r(
                "small minor short words article preposition and the of",
                "Keep a, an, the, of, and, in, on lowercase unless first.",
            ),
            _r("rest other letters lower remaining", "Lowercase the rest of every word."),
        ),
        (
            _case("test_small_words", _c("title_case", ("the lord of the rings",), "The Lord of the Rings")),
            _case("test_rest_lowered", _c("title_case", ("hELLO wORLD",), "Hello World")),
        ),
        """SMALL = {"a", "an", "the", "of", "and", "in", "on"}
def title_case(text):
    words = text.lower().split()
    return " ".join(w if i and w in SMALL else w[:1].upper() + w[1:] for i, w in enumerate(words))
""",
        """def title_case(text):
    return " ".join(w[:1].upper() + w[1:] for w in text.split())
""",
    ),
    Task(
        "moving_average",
        "Write `moving_average(values, window)` computing a moving average.",
        (
            _r(
                "start beginning first fewer early length partial short",
                "Output has one value per input; early values average what is available.",
            ),
            _r("round rounding decimal decimals precision", "Round each value to 2 decimals."),
        ),
        (
            _case("test_length", _c("moving_average", ([1, 2, 3, 4], 2), [1.0, 1.5, 2.5, 3.5])),
            _case("test_rounding", _c("moving_average", ([1, 1, 2], 3), [1.0, 1.0, 1.33])),
        ),
        """def moving_average(values, window):
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1): i + 1]
        out.append(round(sum(part) / len(part), 2))
    return out
""",
        """def moving_average(values, window):
    return [sum(values[i:i + window]) / window for i in range(len(values) - window + 1)]
""",
    ),
    Task(
        "valid_password",
        "Write `valid_password(password)` that checks whether a password is acceptable.",
        (
            _r("length long short minimum characters many", "At least 10 characters."),
            _r("digit number numbers numeric", "Must contain a digit."),
            _r("upper uppercase capital case letter", "Must contain an uppercase letter."),
            _r("space spaces whitespace blank", "Must not contain spaces."),
        ),
        (
            _case("test_good", _c("valid_password", ("Abcdefgh12",), True)),
            _case("test_too_short", _c("valid_password", ("Abcdef12",), False)),
            _case("test_no_upper", _c("valid_password", ("abcdefgh12",), False)),
            _case("test_space", _c("valid_password", ("Abcd efgh12",), False)),
        ),
        """def valid_password(password):
    return (len(password) >= 10 and any(c.isdigit() for c in password)
            and any(c.isupper() for c in password) and " " not in password)
""",
        """def valid_password(password):
    return len(password) >= 8 and any(c.isdigit() for c in password)
""",
    ),
    Task(
        "parse_row",
        "Write `parse_row(line)` that splits one line of a delimited text file into fields.",
        (
            _r("delimiter separator comma semicolon split character", "Fields are separated by ';'."),
            _r("quote quotes quoted escape", "Double-quoted fields may contain ';'; the quotes are removed."),
            _r("space spaces whitespace strip trim", "Strip surrounding spaces from each field."),
        ),
        (
            _case("test_semicolon", _c("parse_row", ("a; b ;c",), ["a", "b", "c"])),
            _case("test_quoted", _c("parse_row", ('x;"y;z"',), ["x", "y;z"])),
        ),
        """import csv
def parse_row(line):
    return [field.strip() for field in next(csv.reader([line], delimiter=";", skipinitialspace=True))]
""",
        """def parse_row(line):
    return line.split(",")
""",
    ),
    Task(
        "to_roman",
        "Write `to_roman(number)` that converts an integer to Roman numerals.",
        (
            _r("case upper lower capital letters", "Use lowercase letters."),
            _r(
                "range zero negative large limit invalid error maximum",
                "Only 1..3999; anything else raises ValueError.",
            ),
        ),
        (
            _case("test_lower", _c("to_roman", (1994,), "mcmxciv")),
            _case("test_range", _raises("to_roman", (0,)), _raises("to_roman", (4000,))),
        ),
        """def to_roman(number):
    if not 1 <= number <= 3999:
        raise ValueError(number)
    table = [(1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"),
             (50, "l"), (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")]
    out = ""
    for value, letters in table:
        while number >= value:
            out += letters
            number -= value
    return out
""",
        """def to_roman(number):
    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, letters in table:
        while number >= value:
            out += letters
            number -= value
    return out
""",
    ),
    Task(
        "format_bytes",
        "Write `format_bytes(size)` that formats a byte count for humans.",
        (
            _r("base 1000 1024 binary decimal kilo unit units", "Use 1024-based units named B, KiB, MiB, GiB, TiB."),
            _r("decimal decimals round precision digits", "One decimal for KiB and above; bytes as an integer."),
        ),
        (
            _case("test_bytes", _c("format_bytes", (512,), "512 B")),
            _case("test_kib", _c("format_bytes", (1536,), "1.5 KiB")),
            _case("test_mib", _c("format_bytes", (5 * 1024**2,), "5.0 MiB")),
        ),
        """def format_bytes(size):
    if size < 1024:
        return "%d B" % size
    value = float(size)
    for unit in ["KiB", "MiB", "GiB", "TiB"]:
        value /= 1024
        if value < 1024 or unit == "TiB":
            return "%.1f %s" % (value, unit)
""",
        """def format_bytes(size):
    for unit in ["B", "KB", "MB", "GB"]:
        if size < 1000:
            return "%.2f %s" % (size, unit)
        size /= 1000
    return "%.2f TB" % size
""",
    ),
    Task(
        "count_vowels",
        "Write `count_vowels(text)` that counts the vowels in a string.",
        (
            _r("y which letters vowel vowels count counts", "Count a, e, i, o, u and also y."),
            _r("case upper lower capital", "Case does not matter."),
        ),
        (
            _case("test_y", _c("count_vowels", ("rhythm",), 1)),
            _case("test_case", _c("count_vowels", ("AEIOUy",), 6)),
        ),
        """def count_vowels(text):
    return sum(1 for c in text.lower() if c in "aeiouy")
""",
        """def count_vowels(text):
    return sum(1 for c in text if c in "aeiou")
""",
    ),
    Task(
        "next_business_day",
        "Write `next_business_day(day)` that returns the next business day after a datetime.date.",
        (
            _r("holiday holidays christmas year", "January 1 and December 25 are not business days."),
            _r("same today already strictly after itself", "Always return a date strictly after the given one."),
            _r("weekend saturday sunday", "Saturdays and Sundays are not business days."),
        ),
        (
            _case("test_weekend", _c("next_business_day", (datetime.date(2024, 6, 7),), datetime.date(2024, 6, 10))),
            _case(
                "test_strictly_after",
                _c("next_business_day", (datetime.date(2024, 6, 10),), datetime.date(2024, 6, 11)),
            ),
            _case("test_holiday", _c("next_business_day", (datetime.date(2024, 12, 24),), datetime.date(2024, 12, 26))),
        ),
        """import datetime
def next_business_day(day):
    day += datetime.timedelta(days=1)
    while day.weekday() >= 5 or (day.month, day.day) in {(1, 1), (12, 25)}:
        day += datetime.timedelta(days=1)
    return day
""",
        """import datetime
def next_business_day(day):
    day += datetime.timedelta(days=1)
    while day.weekday() >= 5:
        day += datetime.timedelta(days=1)
    return day
""",
    ),
    Task(
        "group_by_length",
        "Write `group_by_length(words)` that groups words by their length.",
        (
            _r("duplicate duplicates repeat repeated unique", "Each word appears once per group."),
            _r("order sort sorted alphabetical", "Words inside a group are sorted alphabetically."),
            _r("return output type dict key keys", "Return a dict from length to list of words."),
        ),
        (
            _case(
                "test_groups_sorted_unique",
                _c(
                    "group_by_length",
                    (["pear", "fig", "kiwi", "fig", "date"],),
                    {3: ["fig"], 4: ["date", "kiwi", "pear"]},
                ),
            ),
        ),
        """def group_by_length(words):
    groups = {}
    for word in sorted(set(words)):
        groups.setdefault(len(word), []).append(word)
    return groups
""",
        """def group_by_length(words):
    groups = {}
    for word in words:
        groups.setdefault(len(word), []).append(word)
    return groups
""",
    ),
    Task(
        "mask_email",
        "Write `mask_email(address)` that hides most of an email address.",
        (
            _r(
                "mask stars star asterisk hide how many keep visible local",
                "Keep the first character of the local part, then exactly three '*'.",
            ),
            _r("domain host after", "The domain stays as it is."),
            _r(
                "invalid error bad wrong raise at",
                "Raise ValueError unless there is exactly one '@' with text on both sides.",
            ),
        ),
        (
            _case(
                "test_mask",
                _c("mask_email", ("jonathan@example.com",), "j***@example.com"),
                _c("mask_email", ("al@x.org",), "a***@x.org"),
            ),
            _case("test_invalid", _raises("mask_email", ("a@b@c",))),
        ),
        """def mask_email(address):
    local, sep, domain = address.partition("@")
    if not sep or not local or not domain or "@" in domain:
        raise ValueError(address)
    return local[0] + "***@" + domain
""",
        """def mask_email(address):
    local, domain = address.split("@")
    return local[0] + "*" * (len(local) - 1) + "@" + domain
""",
    ),
    Task(
        "safe_divide",
        "Write `safe_divide(a, b)` that divides two numbers safely.",
        (
            _r("zero division divide denominator", "Dividing by zero returns None."),
            _r("round rounding decimal decimals precision", "Round the result to 3 decimals."),
        ),
        (
            _case("test_zero", _c("safe_divide", (1, 0), None)),
            _case("test_round", _c("safe_divide", (1, 3), 0.333)),
        ),
        """def safe_divide(a, b):
    if b == 0:
        return None
    return round(a / b, 3)
""",
        """def safe_divide(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        return 0
""",
    ),
    Task(
        "compress",
        "Write `compress(text)` that run-length encodes a string.",
        (
            _r("single one count counts number once", "Write the count only when a run is longer than 1."),
            _r("case upper lower capital", "Upper and lower case letters are different."),
        ),
        (
            _case("test_counts", _c("compress", ("aaabcc",), "a3bc2")),
            _case("test_case", _c("compress", ("aAa",), "aAa")),
        ),
        """def compress(text):
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(text[i] + (str(j - i) if j - i > 1 else ""))
        i = j
    return "".join(out)
""",
        """def compress(text):
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(text[i] + str(j - i))
        i = j
    return "".join(out)
""",
    ),
    Task(
        "clamp",
        "Write `clamp(value, low, high)` that limits a value to a range.",
        (
            _r("order swap reversed greater bigger low high bounds", "If low > high, swap them first."),
            _r("type int float return", "Return the value unchanged in type when inside the range."),
        ),
        (
            _case("test_inside", _c("clamp", (5, 1, 10), 5)),
            _case("test_swapped_bounds", _c("clamp", (20, 10, 1), 10), _c("clamp", (-3, 10, 1), 1)),
        ),
        """def clamp(value, low, high):
    if low > high:
        low, high = high, low
    return min(max(value, low), high)
""",
        """def clamp(value, low, high):
    return max(low, min(value, high))
""",
    ),
    Task(
        "snake_to_camel",
        "Write `snake_to_camel(name)` that converts snake_case to camelCase.",
        (
            _r("leading prefix underscore private start", "Keep leading underscores as they are."),
            _r("double consecutive multiple repeated underscores", "Treat several underscores in a row as one."),
            _r("first lower upper capital case pascal", "The first word stays lowercase (lowerCamelCase)."),
        ),
        (
            _case("test_basic", _c("snake_to_camel", ("hello_world",), "helloWorld")),
            _case("test_leading", _c("snake_to_camel", ("__private_name",), "__privateName")),
            _case("test_double", _c("snake_to_camel", ("a__b",), "aB")),
        ),
        """def snake_to_camel(name):
    stripped = name.lstrip("_")
    prefix = name[: len(name) - len(stripped)]
    parts = [p for p in stripped.split("_") if p]
    if not parts:
        return name
    return prefix + parts[0].lower() + "".join(p.capitalize() for p in parts[1:])
""",
        """def snake_to_camel(name):
    parts = name.split("_")
    return parts[0] + "".join(p.capitalize() for p in parts[1:])
""",
    ),
    Task(
        "letter_grade",
        "Write `letter_grade(score)` that turns a 0-100 score into a letter grade.",
        (
            _r(
                "cutoff cutoffs threshold thresholds boundaries scale bands each",
                "A from 93, B from 85, C from 77, D from 70, otherwise F.",
            ),
            _r("invalid range negative above 100 error raise", "Scores outside 0..100 raise ValueError."),
        ),
        (
            _case(
                "test_cutoffs",
                _c("letter_grade", (93,), "A"),
                _c("letter_grade", (90,), "B"),
                _c("letter_grade", (76,), "D"),
                _c("letter_grade", (69,), "F"),
            ),
            _case("test_invalid", _raises("letter_grade", (101,))),
        ),
        """def letter_grade(score):
    if not 0 <= score <= 100:
        raise ValueError(score)
    for cutoff, letter in ((93, "A"), (85, "B"), (77, "C"), (70, "D")):
        if score >= cutoff:
            return letter
    return "F"
""",
        """def letter_grade(score):
    for cutoff, letter in ((90, "A"), (80, "B"), (70, "C"), (60, "D")):
        if score >= cutoff:
            return letter
    return "F"
""",
    ),
    Task(
        "leap_years",
        "Write `leap_years(start, end)` listing the leap years between two years.",
        (
            _r("inclusive exclusive include end endpoint bounds both", "Both start and end are included."),
            _r("reversed order greater start after backwards", "If start > end return an empty list."),
        ),
        (
            _case("test_inclusive", _c("leap_years", (1996, 2004), [1996, 2000, 2004])),
            _case("test_century", _c("leap_years", (1900, 1900), [])),
            _case("test_reversed", _c("leap_years", (2004, 1996), [])),
        ),
        """def leap_years(start, end):
    return [y for y in range(start, end + 1) if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)]
""",
        """def leap_years(start, end):
    return [y for y in range(min(start, end), max(start, end)) if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)]
""",
    ),
    Task(
        "truncate",
        "Write `truncate(text, limit)` that shortens text to a length limit.",
        (
            _r("ellipsis dots suffix marker indicate end", "Append '…' (one character), counted within the limit."),
            _r("word words boundary cut middle split", "Never cut a word in half: drop the partial word."),
            _r("short fits under already", "Text within the limit is returned unchanged."),
        ),
        (
            _case("test_fits", _c("truncate", ("short", 10), "short")),
            _case("test_word_boundary", _c("truncate", ("hello wonderful world", 12), "hello…")),
        ),
        """def truncate(text, limit):
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut and text[limit - 1] != " ":
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip() + "…"
""",
        """def truncate(text, limit):
    return text if len(text) <= limit else text[: limit - 3] + "..."
""",
    ),
    Task(
        "digit_sum",
        "Write `digit_sum(number)` that sums the digits of an integer.",
        (
            _r("negative minus sign", "Use the absolute value of negative numbers."),
            _r("single repeat until one digit result large", "Repeat until a single digit remains."),
        ),
        (
            _case("test_repeat", _c("digit_sum", (9875,), 2)),
            _case("test_negative", _c("digit_sum", (-38,), 2)),
        ),
        """def digit_sum(number):
    number = abs(number)
    while number >= 10:
        number = sum(int(d) for d in str(number))
    return number
""",
        """def digit_sum(number):
    return sum(int(d) for d in str(number))
""",
    ),
    Task(
        "initials",
        "Write `initials(name)` that returns a person's initials.",
        (
            _r("format dot dots period separator style", "Each initial is followed by a dot, no spaces: 'J.R.R.T.'."),
            _r("hyphen hyphenated double barrel dash", "Hyphenated parts each give an initial."),
            _r("case upper lower capital", "Initials are uppercase."),
        ),
        (
            _case("test_basic", _c("initials", ("john ronald reuel tolkien",), "J.R.R.T.")),
            _case("test_hyphen", _c("initials", ("Anne-Marie Smith",), "A.M.S.")),
        ),
        """import re
def initials(name):
    return "".join(part[0].upper() + "." for part in re.split(r"[\\s-]+", name.strip()) if part)
""",
        """def initials(name):
    return "".join(part[0].upper() for part in name.split())
""",
    ),
    Task(
        "most_common_char",
        "Write `most_common_char(text)` that returns the most frequent character.",
        (
            _r(
                "tie ties equal same break order first", "On a tie return the character that appears first in the text."
            ),
            _r("space spaces whitespace ignore", "Ignore whitespace."),
            _r("empty none nothing", "For empty input return None."),
        ),
        (
            _case("test_tie_first_seen", _c("most_common_char", ("abba",), "a")),
            _case("test_spaces", _c("most_common_char", ("a  b  b",), "b")),
            _case("test_empty", _c("most_common_char", ("   ",), None)),
        ),
        """def most_common_char(text):
    counts = {}
    for c in text:
        if not c.isspace():
            counts[c] = counts.get(c, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return next(c for c in counts if counts[c] == best)
""",
        """def most_common_char(text):
    return max(sorted(set(text)), key=text.count)
""",
    ),
)
