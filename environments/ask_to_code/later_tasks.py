"""The second half of the ask_to_code task bank, in the bank's order (tasks.py holds the first half and ``TASKS``)."""

from __future__ import annotations

import datetime

from environments.ask_to_code.task_model import Task, case, check, raises, requirement

LATER_TASKS: tuple[Task, ...] = (
    Task(
        "valid_password",
        "Write `valid_password(password)` that checks whether a password is acceptable.",
        (
            requirement("length long short minimum characters many", "At least 10 characters."),
            requirement("digit number numbers numeric", "Must contain a digit."),
            requirement("upper uppercase capital case letter", "Must contain an uppercase letter."),
            requirement("space spaces whitespace blank", "Must not contain spaces."),
        ),
        (
            case("test_good", check("valid_password", ("Abcdefgh12",), True)),
            case("test_too_short", check("valid_password", ("Abcdef12",), False)),
            case("test_no_upper", check("valid_password", ("abcdefgh12",), False)),
            case("test_space", check("valid_password", ("Abcd efgh12",), False)),
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
            requirement("delimiter separator comma semicolon split character", "Fields are separated by ';'."),
            requirement("quote quotes quoted escape", "Double-quoted fields may contain ';'; the quotes are removed."),
            requirement("space spaces whitespace strip trim", "Strip surrounding spaces from each field."),
        ),
        (
            case("test_semicolon", check("parse_row", ("a; b ;c",), ["a", "b", "c"])),
            case("test_quoted", check("parse_row", ('x;"y;z"',), ["x", "y;z"])),
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
            requirement("case upper lower capital letters", "Use lowercase letters."),
            requirement(
                "range zero negative large limit invalid error maximum",
                "Only 1..3999; anything else raises ValueError.",
            ),
        ),
        (
            case("test_lower", check("to_roman", (1994,), "mcmxciv")),
            case("test_range", raises("to_roman", (0,)), raises("to_roman", (4000,))),
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
            requirement(
                "base 1000 1024 binary decimal kilo unit units", "Use 1024-based units named B, KiB, MiB, GiB, TiB."
            ),
            requirement(
                "decimal decimals round precision digits", "One decimal for KiB and above; bytes as an integer."
            ),
        ),
        (
            case("test_bytes", check("format_bytes", (512,), "512 B")),
            case("test_kib", check("format_bytes", (1536,), "1.5 KiB")),
            case("test_mib", check("format_bytes", (5 * 1024**2,), "5.0 MiB")),
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
            requirement("y which letters vowel vowels count counts", "Count a, e, i, o, u and also y."),
            requirement("case upper lower capital", "Case does not matter."),
        ),
        (
            case("test_y", check("count_vowels", ("rhythm",), 1)),
            case("test_case", check("count_vowels", ("AEIOUy",), 6)),
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
            requirement("holiday holidays christmas year", "January 1 and December 25 are not business days."),
            requirement(
                "same today already strictly after itself", "Always return a date strictly after the given one."
            ),
            requirement("weekend saturday sunday", "Saturdays and Sundays are not business days."),
        ),
        (
            case("test_weekend", check("next_business_day", (datetime.date(2024, 6, 7),), datetime.date(2024, 6, 10))),
            case(
                "test_strictly_after",
                check("next_business_day", (datetime.date(2024, 6, 10),), datetime.date(2024, 6, 11)),
            ),
            case(
                "test_holiday", check("next_business_day", (datetime.date(2024, 12, 24),), datetime.date(2024, 12, 26))
            ),
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
            requirement("duplicate duplicates repeat repeated unique", "Each word appears once per group."),
            requirement("order sort sorted alphabetical", "Words inside a group are sorted alphabetically."),
            requirement("return output type dict key keys", "Return a dict from length to list of words."),
        ),
        (
            case(
                "test_groups_sorted_unique",
                check(
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
            requirement(
                "mask stars star asterisk hide how many keep visible local",
                "Keep the first character of the local part, then exactly three '*'.",
            ),
            requirement("domain host after", "The domain stays as it is."),
            requirement(
                "invalid error bad wrong raise at",
                "Raise ValueError unless there is exactly one '@' with text on both sides.",
            ),
        ),
        (
            case(
                "test_mask",
                check("mask_email", ("jonathan@example.com",), "j***@example.com"),
                check("mask_email", ("al@x.org",), "a***@x.org"),
            ),
            case("test_invalid", raises("mask_email", ("a@b@c",))),
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
            requirement("zero division divide denominator", "Dividing by zero returns None."),
            requirement("round rounding decimal decimals precision", "Round the result to 3 decimals."),
        ),
        (
            case("test_zero", check("safe_divide", (1, 0), None)),
            case("test_round", check("safe_divide", (1, 3), 0.333)),
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
            requirement("single one count counts number once", "Write the count only when a run is longer than 1."),
            requirement("case upper lower capital", "Upper and lower case letters are different."),
        ),
        (
            case("test_counts", check("compress", ("aaabcc",), "a3bc2")),
            case("test_case", check("compress", ("aAa",), "aAa")),
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
            requirement("order swap reversed greater bigger low high bounds", "If low > high, swap them first."),
            requirement("type int float return", "Return the value unchanged in type when inside the range."),
        ),
        (
            case("test_inside", check("clamp", (5, 1, 10), 5)),
            case("test_swapped_bounds", check("clamp", (20, 10, 1), 10), check("clamp", (-3, 10, 1), 1)),
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
            requirement("leading prefix underscore private start", "Keep leading underscores as they are."),
            requirement(
                "double consecutive multiple repeated underscores", "Treat several underscores in a row as one."
            ),
            requirement("first lower upper capital case pascal", "The first word stays lowercase (lowerCamelCase)."),
        ),
        (
            case("test_basic", check("snake_to_camel", ("hello_world",), "helloWorld")),
            case("test_leading", check("snake_to_camel", ("__private_name",), "__privateName")),
            case("test_double", check("snake_to_camel", ("a__b",), "aB")),
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
            requirement(
                "cutoff cutoffs threshold thresholds boundaries scale bands each",
                "A from 93, B from 85, C from 77, D from 70, otherwise F.",
            ),
            requirement("invalid range negative above 100 error raise", "Scores outside 0..100 raise ValueError."),
        ),
        (
            case(
                "test_cutoffs",
                check("letter_grade", (93,), "A"),
                check("letter_grade", (90,), "B"),
                check("letter_grade", (76,), "D"),
                check("letter_grade", (69,), "F"),
            ),
            case("test_invalid", raises("letter_grade", (101,))),
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
            requirement("inclusive exclusive include end endpoint bounds both", "Both start and end are included."),
            requirement("reversed order greater start after backwards", "If start > end return an empty list."),
        ),
        (
            case("test_inclusive", check("leap_years", (1996, 2004), [1996, 2000, 2004])),
            case("test_century", check("leap_years", (1900, 1900), [])),
            case("test_reversed", check("leap_years", (2004, 1996), [])),
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
            requirement(
                "ellipsis dots suffix marker indicate end", "Append '…' (one character), counted within the limit."
            ),
            requirement("word words boundary cut middle split", "Never cut a word in half: drop the partial word."),
            requirement("short fits under already", "Text within the limit is returned unchanged."),
        ),
        (
            case("test_fits", check("truncate", ("short", 10), "short")),
            case("test_word_boundary", check("truncate", ("hello wonderful world", 12), "hello…")),
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
            requirement("negative minus sign", "Use the absolute value of negative numbers."),
            requirement("single repeat until one digit result large", "Repeat until a single digit remains."),
        ),
        (
            case("test_repeat", check("digit_sum", (9875,), 2)),
            case("test_negative", check("digit_sum", (-38,), 2)),
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
            requirement(
                "format dot dots period separator style", "Each initial is followed by a dot, no spaces: 'J.R.R.T.'."
            ),
            requirement("hyphen hyphenated double barrel dash", "Hyphenated parts each give an initial."),
            requirement("case upper lower capital", "Initials are uppercase."),
        ),
        (
            case("test_basic", check("initials", ("john ronald reuel tolkien",), "J.R.R.T.")),
            case("test_hyphen", check("initials", ("Anne-Marie Smith",), "A.M.S.")),
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
            requirement(
                "tie ties equal same break order first", "On a tie return the character that appears first in the text."
            ),
            requirement("space spaces whitespace ignore", "Ignore whitespace."),
            requirement("empty none nothing", "For empty input return None."),
        ),
        (
            case("test_tie_first_seen", check("most_common_char", ("abba",), "a")),
            case("test_spaces", check("most_common_char", ("a  b  b",), "b")),
            case("test_empty", check("most_common_char", ("   ",), None)),
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
