"""Replace the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in a
Markdown file: how the benchmark scripts write their tables into
BENCHMARKS.md."""


def write_section(path, name, text):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    with open(path) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        raise RuntimeError(f"{path} lacks the {begin} / {end} markers")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + text + "\n" + end + tail)
