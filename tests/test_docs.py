"""The documentation holds together: docs/config.md is what docs/config_reference.py generates from the proto's
comments (and says it when stale), and every relative link of README.md and docs/*.md resolves."""

import importlib.util
import os
import re
import shutil
import sys

import pytest

from tests.support.paths import REPO
from tests.test_readme import documentation_pages

STALE = "docs/config.md is stale: run .venv/bin/python docs/config_reference.py > docs/config.md"


def _load_generator():
    # docs/ is not part of the installed package: the generator is loaded from the repository.
    spec = importlib.util.spec_from_file_location("config_reference", os.path.join(REPO, "docs", "config_reference.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module while the class is made
    spec.loader.exec_module(module)
    return module


config_reference = _load_generator()


def test_config_reference_is_current():
    message = config_reference.stale_message()
    if message:
        pytest.fail(message)


@pytest.fixture
def edited_proto(tmp_path):
    """A copy of the schema with one field's comment changed."""
    path = tmp_path / "shardmill_config.proto"
    shutil.copy(config_reference.PROTO, path)
    text = path.read_text()
    old = "// Seed of every random decision of the job;"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "// Seed of every random decision (edited comment);"))
    return path


def test_check_fails_when_a_proto_comment_changes(edited_proto, capsys):
    assert config_reference.stale_message(str(edited_proto)) == STALE
    assert config_reference.main(["--check", "--proto", str(edited_proto)]) == 1
    assert capsys.readouterr().err.strip() == STALE


def test_check_passes_on_the_repository(capsys):
    assert config_reference.main(["--check"]) == 0
    assert capsys.readouterr().err == ""


def test_field_meaning_is_the_protos_comment_with_newlines_folded(edited_proto):
    page = config_reference.render(config_reference.read_schema(str(edited_proto)))
    row = next(line for line in page.splitlines() if line.startswith("| `seed` |"))
    assert row == ("| `seed` | uint64 | `0` | Seed of every random decision (edited comment); same seed, config and "
                   "input give byte-identical output. Default 0. Any uint64. |")


def _headings(page: str) -> list[str]:
    return re.findall(r"^## (\S+)$", page, re.MULTILINE)


def test_sections_start_at_the_job_config_then_follow_its_fields_depth_first():
    page = config_reference.render(config_reference.read_schema())
    assert _headings(page) == [
        "JobConfig", "OutputConfig", "ShardCodec", "Lc0Config", "IndexConfig", "CountMethod", "ShufflingChunkPoolConfig",
        "LabelSamplingConfig", "LabelSamplingMode", "TokenDatasetConfig", "TokenCorpus", "TokenSplit",
        "MegatronCache"]


def test_every_link_names_a_section():
    page = config_reference.render(config_reference.read_schema())
    anchors = {re.sub(r"[^a-z0-9 _-]", "", heading.lower()) for heading in _headings(page)}  # GitHub's rule
    links = set(re.findall(r"\]\(#([^)]*)\)", page))
    assert links and links <= anchors


def test_the_job_kind_is_a_oneof_and_enums_list_their_values():
    page = config_reference.render(config_reference.read_schema()).splitlines()
    assert ("| `job` (oneof) | one of `lc0`, `label_sampling`, `token_dataset` | — | The job kind and its settings: "
            "exactly one section. Unset: the lc0 job with its defaults. A second section is refused when the "
            "config is read. |") in page
    assert "| `lc0` | [Lc0Config](#lc0config) | — | In oneof `job`. The lc0 chunk-sampling job. |" in page
    assert ("| `count_method` | [CountMethod](#countmethod) | `SCAN` | How record counts are established. "
            "Default SCAN. |") in page
    assert ("| `DECOMPRESS` | 3 | Decompresses every chunk: exact counts and CRC verification, at full inflate "
            "cost. What `shardmill count --verify` uses. |") in page
    assert "Set as `lc0.index.count_method`." in page
    assert any(line.startswith("| `column_types` | `map<string, string>` | — | Arrow types") for line in page)
    assert any(line.startswith("| `hanse_sampling_gamma` | double | `1.0` |") for line in page)


def test_nested_types_maps_of_messages_and_types_the_root_does_not_use(tmp_path):
    proto = tmp_path / "small.proto"
    proto.write_text("""syntax = "proto2";
package small;
message Spare {}
// Unused | by the root.
enum Loose { A = 0; }
message JobConfig {
  // A nested one.
  message Part {
    optional string name = 1 [default = "x\\"y"];  // trailing comment
  }
  // Parts | by name.
  map<string, Part> parts = 1;
  repeated Part list = 2;
}
""")
    page = config_reference.render(config_reference.read_schema(str(proto)))
    assert _headings(page) == ["JobConfig", "JobConfig.Part", "Spare", "Loose"]  # the unused ones in file order
    lines = page.splitlines()
    assert ("| `parts` | `map<string, JobConfig.Part>` of [JobConfig.Part](#jobconfigpart) | — | Parts \\| by name. |"
            in lines)
    assert "| `list` | repeated [JobConfig.Part](#jobconfigpart) | — |  |" in lines
    assert '| `name` | string | `"x\\"y"` | trailing comment |' in lines
    assert "Set as `parts`, `list`." in lines
    assert "Unused | by the root." in lines
    assert "Not used by JobConfig." in lines


def test_a_schema_protoc_refuses_exits_2_naming_it(tmp_path, capfd):
    proto = tmp_path / "broken.proto"
    proto.write_text('syntax = "proto2";\nmessage JobConfig { optional strin x = 1; }\n')
    assert config_reference.main(["--proto", str(proto)]) == 2
    err = capfd.readouterr().err
    assert f"{proto}: protoc failed (exit 1)" in err and "strin" in err


# Relative links of README.md and docs/*.md: every file and anchor they name exists.

def _without_code(text: str) -> str:
    """The page's text with fenced blocks and inline code removed: a link inside code is not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: inline markup dropped, lower case, punctuation but `-` and
    `_` removed, spaces made `-`; a repeated heading gets `-1`, `-2`, ..."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), re.M):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
        slug = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def broken_links(page: str) -> list[str]:
    """The relative links of a Markdown page whose file or anchor does not exist, as `target: why`."""
    with open(page) as f:
        text = f.read()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not relative
            continue
        path, _, anchor = target.partition("#")
        linked = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(linked):
            broken.append(f"{target}: no file {os.path.relpath(linked, REPO)}")
        elif anchor and linked.endswith(".md"):
            with open(linked) as f:
                if anchor not in heading_anchors(f.read()):
                    broken.append(f"{target}: no heading with anchor #{anchor} in {os.path.relpath(linked, REPO)}")
    return broken


@pytest.mark.parametrize("page", documentation_pages())
def test_relative_links_resolve(page):
    assert broken_links(os.path.join(REPO, page)) == []


def test_anchors_follow_githubs_rule():
    page = "# Title\n## Token datasets (Megatron `.idx/.bin`)\n## A, b: c_d\n## A, b: c_d\n```\n# not a heading\n```\n"
    assert heading_anchors(page) == {"title", "token-datasets-megatron-idxbin", "a-b-c_d", "a-b-c_d-1"}


def test_a_missing_file_or_anchor_is_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n## Its part\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n[ok](other.md#its-part) [self](#page) [web](https://example.com/x.md)\n"
                    "`[code](nowhere.md)` [gone](missing.md) [no anchor](other.md#nothing)\n"
                    "[no local anchor](#elsewhere)\n")
    assert broken_links(str(page)) == [
        "missing.md: no file " + os.path.relpath(str(tmp_path / "missing.md"), REPO),
        "other.md#nothing: no heading with anchor #nothing in " + os.path.relpath(str(tmp_path / "other.md"), REPO),
        "#elsewhere: no heading with anchor #elsewhere in " + os.path.relpath(str(page), REPO)]
