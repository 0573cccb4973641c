"""docs/redirect.md's idiom tables and the corpus name the same idioms."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "redirect.md").read_text()
MANIFEST = json.loads((ROOT / "tests" / "corpus" / "manifest.json").read_text())


def _rows_with_corpus_column():
    rows, in_table = [], False
    for line in DOC.splitlines():
        if line.startswith("|") and line.rstrip().endswith("corpus idioms |"):
            in_table = True
            continue
        if in_table and line.startswith("|---"):
            continue
        if in_table and line.startswith("|"):
            rows.append(line)
        else:
            in_table = False
    return rows


def test_every_idiom_the_tables_name_is_in_the_corpus():
    rows = _rows_with_corpus_column()
    assert len(rows) >= 30
    for row in rows:
        cell = row.rstrip().rstrip("|").rsplit("|", 1)[1].strip()
        if cell == "—":
            continue
        for idiom in re.findall(r"`([a-z0-9-]+)`", cell):
            assert idiom in MANIFEST["idioms"], f"{idiom!r} (docs/redirect.md) is not a corpus idiom"


def test_every_corpus_idiom_is_named_in_the_tables():
    named = set()
    for row in _rows_with_corpus_column():
        named.update(re.findall(r"`([a-z0-9-]+)`", row.rstrip().rstrip("|").rsplit("|", 1)[1]))
    missing = sorted(set(MANIFEST["idioms"]) - named)
    assert not missing, f"corpus idioms docs/redirect.md does not name: {missing}"


FRAMEWORKS = json.loads((ROOT / "tests" / "frameworks" / "manifest.json").read_text())


def _framework_sections(part_title="Frameworks"):
    """{section title: entries its "Corpus entries:" line names} of one part (``## <part_title>``)."""
    part = DOC.split(f"\n## {part_title}\n", 1)[1].split("\n## ", 1)[0]
    sections = {}
    for block in part.split("\n### ")[1:]:
        title, body = block.split("\n", 1)
        line = body.split("- Corpus entries:", 1)[1].split("\n- ", 1)[0].split("\n\n", 1)[0]
        sections[title.strip()] = re.findall(r"`([a-z0-9_]+)`", line)
    return sections


def test_each_framework_section_names_corpus_entries_and_every_entry_is_named():
    sections = _framework_sections()
    assert {"Hugging Face Trainer and PEFT", "Accelerate", "Lightning (Trainer, Fabric)", "timm",
            "torch.compile"} <= set(sections)
    entries = {e["name"] for e in FRAMEWORKS["scripts"]}
    named = {n for names in sections.values() for n in names}
    assert all(sections.values()), f"a section names no corpus entry: {sections}"
    assert named <= entries, f"docs/redirect.md names entries tests/frameworks lacks: {sorted(named - entries)}"
    assert entries <= named, f"tests/frameworks entries no framework section names: {sorted(entries - named)}"


def test_each_llm_stack_section_names_its_recipes_and_every_recipe_is_named():
    sections = _framework_sections("LLM training stacks")
    assert {"DeepSpeed", "HF Trainer and Accelerate with DeepSpeed"} <= set(sections)
    entries = {e["name"] for path in (ROOT / "tests" / "llmstack").glob("*.json")
               for e in json.loads(path.read_text())["scripts"]}
    named = {n for names in sections.values() for n in names}
    assert all(sections.values()), f"a section names no corpus entry: {sections}"
    assert named <= entries, f"docs/redirect.md names recipes tests/llmstack lacks: {sorted(named - entries)}"
    assert entries <= named, f"tests/llmstack recipes no section of docs/redirect.md names: {sorted(entries - named)}"
