#!/usr/bin/env python3
"""No function of the library or the apps is longer than 80 lines, none of train/ longer than 60.

  tests/docs/function_lengths.py [--list N] [ROOT]

Reads every .h and .cpp under core/, nn/, data/, models/, train/ and apps/ (tests are not
read), finds the function definitions (free functions and methods, in namespaces and class
bodies; a lambda counts as part of the function it is written in) and counts each from the line
of its name to the line of its closing brace. Exits 1, listing the offenders, when one is over
its limit. --list N prints the N longest instead and exits 0.

The reader is a brace matcher over the code with comments, strings and preprocessor lines
blanked, not a C++ parser: a `{` at namespace or class level opens a function when the text
before it, back to the previous `;`, `{` or `}`, has a `)` and no `=` outside parentheses.
"""
import os
import re
import sys

FOLDERS = ("core", "nn", "data", "models", "train", "apps")
LIMIT, TRAIN_LIMIT = 80, 60


def blank_non_code(text):
    """text with comments, string and char literals and preprocessor lines replaced by spaces
    (newlines kept, so positions and line numbers stay)."""
    out, i, n = list(text), 0, len(text)

    def blank(a, b):
        for j in range(a, b):
            if out[j] != "\n":
                out[j] = " "

    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":  # a preprocessor line, with its continuations
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            blank(i, j)
            i = j
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            delim = text[i + 2:text.index("(", i + 2)]
            j = text.index(")" + delim + '"', i) + len(delim) + 2
            blank(i, j)
            i = j
        elif c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
            i += 1  # a digit separator: 100'000
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def top_level(head, ch):
    """Whether ch occurs in head outside parentheses, brackets and template angle brackets."""
    depth = 0
    for c in head:
        if c in "([<":
            depth += 1
        elif c in ")]>":
            depth = max(0, depth - 1)
        elif c == ch and depth == 0:
            return True
    return False


def kind_of(head):
    """What a `{` opens at namespace or class level, from the text before it."""
    h = " ".join(head.split())
    if re.search(r"\bnamespace\b", h) or h.startswith('extern "C"') or h == "extern":
        return "scope"
    if ")" in h and not top_level(h, "="):
        return "function"
    if re.search(r"\b(class|struct|union|enum)\b", h) and not top_level(h, "="):
        return "scope"
    return "other"  # an initializer, an enum's values


def function_name(head):
    """The name before the parameter list: `Tensor conv2d(const Tensor& x` -> conv2d."""
    flat = " ".join(head.split())
    m = re.search(r"(operator\s*\S+?|~?[A-Za-z_]\w*(?:\s*::\s*~?[A-Za-z_]\w*)*)\s*(<[^()]*>)?\s*\(", flat)
    return m.group(1).replace(" ", "") if m else flat[:40]


def functions(text):
    """[(name, first line, last line)] of the function definitions in one file's text."""
    code = blank_non_code(text)
    found, stack, head_start = [], [], 0  # stack: (kind, name, head line) per open brace
    for i, c in enumerate(code):
        if c in ";}":
            if c == "}" and stack:
                kind, name, line = stack.pop()
                if kind == "function" and not any(k == "function" for k, _, _ in stack):
                    found.append((name, line, code.count("\n", 0, i) + 1))
            head_start = i + 1
        elif c == "{":
            inside_function = any(k == "function" for k, _, _ in stack)
            inside_other = any(k == "other" for k, _, _ in stack)
            head = code[head_start:i]
            kind = "block" if inside_function or inside_other else kind_of(head)
            name, line = "", 0
            if kind == "function":
                name = function_name(head)
                at = head.find(name.split("::")[0]) if name else -1
                first = head_start + (at if at >= 0 else len(head) - len(head.lstrip()))
                line = code.count("\n", 0, first) + 1
            stack.append((kind, name, line))
            head_start = i + 1
    return found


def measure(root):
    """[(lines, path, name, first line)] for every function of the folders read."""
    rows = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if f.endswith((".h", ".cpp")):
                    path = os.path.join(dirpath, f)
                    rel = os.path.relpath(path, root)
                    with open(path, encoding="utf-8") as fh:
                        for name, first, last in functions(fh.read()):
                            rows.append((last - first + 1, rel, name, first))
    return rows


def main():
    args = sys.argv[1:]
    listing = 0
    if args[:1] == ["--list"]:
        listing, args = int(args[1]), args[2:]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    rows = measure(root)
    if len(rows) < 500:  # the reader found too few: it is broken, not the code good
        sys.exit(f"error: only {len(rows)} functions found under {root}")
    if listing:
        for n, rel, name, first in sorted(rows, reverse=True)[:listing]:
            print(f"{n:5d}  {rel}:{first}  {name}")
        return
    over = [(n, rel, name, first) for n, rel, name, first in rows
            if n > (TRAIN_LIMIT if rel.startswith("train" + os.sep) else LIMIT)]
    for n, rel, name, first in sorted(over, reverse=True):
        limit = TRAIN_LIMIT if rel.startswith("train" + os.sep) else LIMIT
        print(f"error: {rel}:{first}: {name} is {n} lines (at most {limit}: split it into named kernels)")
    if over:
        sys.exit(1)
    longest = max(rows)
    print(f"function_lengths.py: {len(rows)} functions, the longest {longest[0]} lines ({longest[1]} {longest[2]}); "
          f"none over {LIMIT}, none in train/ over {TRAIN_LIMIT}")


if __name__ == "__main__":
    main()
