"""The fenced code blocks of a README in one language, in order: shared by the
consumer test (Swift blocks) and the C host example (C blocks).

As a command: readme_blocks.py <README.md> <language> <directory> writes each block to
<directory>/readme-<n>.<language> and says how many there are."""
import pathlib
import sys


def blocks(readme, language):
    """The text of every block fenced ```<language>, each ending with a newline."""
    out, inside, current = [], False, []
    for line in pathlib.Path(readme).read_text().splitlines():
        if not inside and line == "```" + language:
            inside, current = True, []
        elif inside and line == "```":
            inside = False
            out.append("\n".join(current) + "\n")
        elif inside:
            current.append(line)
    return out


if __name__ == "__main__":
    readme, language, directory = sys.argv[1:4]
    found = blocks(readme, language)
    for i, block in enumerate(found):
        pathlib.Path(directory, f"readme-{i + 1}.{language}").write_text(block)
    print(f"{len(found)} {language} blocks in {pathlib.Path(readme).name}")
