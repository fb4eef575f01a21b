"""The ask_to_code task bank: short, underspecified coding requests with a hidden specification.

Each task has requirements the user only reveals when asked (matched by keywords), hidden test cases that
depend on those requirements, a reference solution (must pass every case) and the "naive" solution a
model would write without asking (must fail at least one) — the tests in tests/unit/envs check both.

The hidden tests are data — (function, arguments, expected value or expected exception) checks grouped into
named cases, a case passing when all its checks do — so the sandboxed program only ever receives the
arguments, and the judge (``mtrl.sandbox.judge``), outside the sandbox, compares (``run_cases``).
"""

from __future__ import annotations

from environments.ask_to_code.later_tasks import LATER_TASKS
from environments.ask_to_code.task_model import Task, case, check, raises, requirement

TASKS: tuple[Task, ...] = (
    Task(
        "slugify",
        "Write a Python function `slugify(title)` that turns a title into a URL slug.",
        (
            requirement(
                "separator separate dash hyphen underscore join space", "Join words with underscores, not hyphens."
            ),
            requirement("long length limit max truncat short", "Slugs are at most 20 characters; cut longer ones."),
            requirement("case lower upper capital", "Lowercase everything."),
        ),
        (
            case("test_basic", check("slugify", ("Hello World!",), "hello_world")),
            case("test_spaces_collapse", check("slugify", ("  A   B ",), "a_b")),
            case("test_truncated", check("slugify", ("x" * 30,), "x" * 20)),
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
            requirement("empty none nothing zero missing", "For an empty list return None."),
            requirement(
                "even middle two average pair", "With an even count return the lower of the two middle values."
            ),
        ),
        (
            case("test_odd", check("median", ([3, 1, 2],), 2)),
            case("test_even_lower_middle", check("median", ([4, 1, 3, 2],), 2)),
            case("test_empty", check("median", ([],), None)),
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
            requirement("case upper lower capital", "Count case-insensitively; keys are lowercase."),
            requirement("short length small ignore skip minimum", "Ignore words shorter than 3 letters."),
            requirement("punctuation symbol comma period apostrophe", "Punctuation is not part of a word."),
        ),
        (
            case("test_case_insensitive", check("word_count", ("Cat cat CAT",), {"cat": 3})),
            case(
                "test_short_words_ignored",
                check("word_count", ("a cat is on the mat",), {"cat": 1, "the": 1, "mat": 1}),
            ),
            case("test_punctuation", check("word_count", ("dog, dog. dog!",), {"dog": 3})),
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
            requirement(
                "unit return seconds minutes result output type", "Return the total as an int number of seconds."
            ),
            requirement("day days d", "Support d (days) as well as h, m and s."),
            requirement(
                "invalid error bad wrong malformed raise exception", "Raise ValueError for anything malformed."
            ),
        ),
        (
            case("test_hours_minutes", check("parse_duration", ("1h30m",), 5400)),
            case("test_days", check("parse_duration", ("2d",), 172800)),
            case("test_invalid", raises("parse_duration", ("abc",))),
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
            requirement(
                "last partial remainder leftover incomplete short pad", "Pad the last chunk with None to full size."
            ),
            requirement("zero negative invalid size error raise", "A size below 1 raises ValueError."),
            requirement("type tuple list return output", "Return a list of lists."),
        ),
        (
            case("test_even", check("chunk", ([1, 2, 3, 4], 2), [[1, 2], [3, 4]])),
            case("test_padded", check("chunk", ([1, 2, 3], 2), [[1, 2], [3, None]])),
            case("test_bad_size", raises("chunk", ([1], 0))),
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
            requirement("case upper lower capital", "Ignore letter case."),
            requirement(
                "space punctuation symbol non alphanumeric character ignore", "Ignore anything but letters and digits."
            ),
            requirement(
                "empty blank nothing", "An empty string (or one with no letters or digits) is not a palindrome."
            ),
        ),
        (
            case("test_sentence", check("is_palindrome", ("A man, a plan, a canal: Panama",), True)),
            case("test_not", check("is_palindrome", ("abc",), False)),
            case("test_empty", check("is_palindrome", ("",), False), check("is_palindrome", ("!!",), False)),
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
            requirement("depth deep level recursive nested", "Flatten all levels of nesting."),
            requirement("tuple tuples other sequence", "Tuples are values: do not flatten them."),
            requirement("string strings str text", "Strings are values too, never split into characters."),
        ),
        (
            case("test_deep", check("flatten", ([1, [2, [3, [4]]]],), [1, 2, 3, 4])),
            case("test_tuples_kept", check("flatten", ([(1, 2), [3]],), [(1, 2), 3])),
            case("test_strings_kept", check("flatten", (["ab", ["cd"]],), ["ab", "cd"])),
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
            requirement("round rounding nearest cent cents precision", "Round to the nearest 0.05 (half up)."),
            requirement("currency symbol dollar sign prefix format", "Prefix with '$' and always show two decimals."),
            requirement("negative minus refund", "Negative amounts look like '-$1.25'."),
        ),
        (
            case("test_rounding", check("format_price", (1.23,), "$1.25"), check("format_price", (1.22,), "$1.20")),
            case("test_two_decimals", check("format_price", (3,), "$3.00")),
            case("test_negative", check("format_price", (-1.24,), "-$1.25")),
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
            requirement("order keep preserve sort first", "Keep the first occurrence and the original order."),
            requirement("case upper lower capital string", "Strings that differ only in case are duplicates."),
        ),
        (
            case("test_order", check("dedupe", ([3, 1, 3, 2, 1],), [3, 1, 2])),
            case("test_case", check("dedupe", (["Apple", "apple", "APPLE", "pear"],), ["Apple", "pear"])),
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
            requirement("format output look style dash result", "Output like '+1-555-123-4567'."),
            requirement("country code digits length eleven ten", "Accept 10 digits, or 11 digits starting with 1."),
            requirement("invalid error bad wrong raise exception", "Anything else raises ValueError."),
        ),
        (
            case("test_ten_digits", check("normalize_phone", ("(555) 123-4567",), "+1-555-123-4567")),
            case("test_eleven_digits", check("normalize_phone", ("1 555 123 4567",), "+1-555-123-4567")),
            case("test_invalid", raises("normalize_phone", ("12345",))),
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
            requirement("tie ties equal same break order", "Break ties alphabetically by name."),
            requirement(
                "large bigger more than fewer exceed k", "If k exceeds the number of names return all of them."
            ),
            requirement("return output type list names", "Return a list of names only."),
        ),
        (
            case("test_ties", check("top_k", ({"bob": 5, "amy": 5, "cat": 1}, 2), ["amy", "bob"])),
            case("test_large_k", check("top_k", ({"a": 1}, 3), ["a"])),
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
            requirement("digit digits number numbers", "Digits rotate too, modulo 10."),
            requirement("case upper lower capital", "Keep each letter's case."),
            requirement("other punctuation space symbol non", "Everything else stays unchanged."),
        ),
        (
            case("test_letters", check("caesar", ("Abc", 1), "Bcd")),
            case("test_digits_rotate", check("caesar", ("a9", 2), "c1")),
            case("test_negative", check("caesar", ("a, b!", -1), "z, a!")),
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
            requirement(
                "touch touching adjacent boundary endpoint share", "Intervals that only touch (end == start) merge too."
            ),
            requirement("return output type tuple format sort order", "Return a sorted list of (start, end) tuples."),
        ),
        (
            case("test_overlap", check("merge_intervals", ([[5, 7], [1, 3], [2, 4]],), [(1, 4), (5, 7)])),
            case("test_touching", check("merge_intervals", ([(1, 2), (2, 3)],), [(1, 3)])),
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
            requirement(
                "small minor short words article preposition and the of",
                "Keep a, an, the, of, and, in, on lowercase unless first.",
            ),
            requirement("rest other letters lower remaining", "Lowercase the rest of every word."),
        ),
        (
            case("test_small_words", check("title_case", ("the lord of the rings",), "The Lord of the Rings")),
            case("test_rest_lowered", check("title_case", ("hELLO wORLD",), "Hello World")),
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
            requirement(
                "start beginning first fewer early length partial short",
                "Output has one value per input; early values average what is available.",
            ),
            requirement("round rounding decimal decimals precision", "Round each value to 2 decimals."),
        ),
        (
            case("test_length", check("moving_average", ([1, 2, 3, 4], 2), [1.0, 1.5, 2.5, 3.5])),
            case("test_rounding", check("moving_average", ([1, 1, 2], 3), [1.0, 1.0, 1.33])),
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
    *LATER_TASKS,
)
