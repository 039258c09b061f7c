"""The config reference (docs/config.md), generated from proto/shardmill_config.proto's own comments.

The proto is the one place a field's meaning, default and range are written; this page is that text laid
out for reading, so it cannot say something the schema does not. protoc parses the schema and keeps each
declaration's comments (its descriptor's source info); nothing here parses the .proto text itself.

    .venv/bin/python docs/config_reference.py > docs/config.md    # regenerate
    .venv/bin/python docs/config_reference.py --check              # exit 1 if docs/config.md is stale

tests/test_docs.py runs the check, so a proto comment changed without regenerating fails the tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import os
import re
import sys
import tempfile

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO = os.path.join(REPO, "proto", "shardmill_config.proto")
DOC = os.path.join(REPO, "docs", "config.md")
# The message a config file holds (pipelines/config.py parses JobConfig); its section comes first.
ROOT_MESSAGE = "JobConfig"
REGENERATE = ".venv/bin/python docs/config_reference.py > docs/config.md"

# Numbers of the descriptor fields that source-info paths are made of (descriptor.proto).
_FILE_MESSAGES, _FILE_ENUMS, _FILE_SYNTAX = 4, 5, 12
_MESSAGE_FIELDS, _MESSAGE_NESTED, _MESSAGE_ENUMS, _MESSAGE_ONEOFS = 2, 3, 4, 8
_MESSAGE_RESERVED_RANGES, _MESSAGE_RESERVED_NAMES = 9, 10
_ENUM_VALUES = 2

_FIELD = descriptor_pb2.FieldDescriptorProto


class ProtocError(RuntimeError):
    """protoc refused the schema (its own messages went to stderr)."""


def read_schema(proto_path: str = PROTO) -> descriptor_pb2.FileDescriptorProto:
    """The schema of proto_path as protoc parsed it, with every declaration's comments (source info)."""
    proto_dir, proto_name = os.path.split(os.path.abspath(proto_path))
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "schema.pb")
        status = protoc.main(["protoc", "--include_source_info", f"--descriptor_set_out={out}",
                              f"-I{proto_dir}", f"-I{well_known}", proto_name])
        if status != 0:
            raise ProtocError(f"{proto_path}: protoc failed (exit {status}); its errors are above")
        descriptor_set = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            descriptor_set.ParseFromString(f.read())
    return descriptor_set.file[0]


@dataclasses.dataclass
class _Type:
    """A message or enum of the schema, with where its comments are."""
    name: str  # as written in the .proto, relative to the package ("JobConfig", "Outer.Inner")
    proto: descriptor_pb2.DescriptorProto | descriptor_pb2.EnumDescriptorProto
    path: tuple[int, ...]  # its source-info path

    @property
    def is_enum(self) -> bool:
        return isinstance(self.proto, descriptor_pb2.EnumDescriptorProto)

    @property
    def is_map_entry(self) -> bool:
        return not self.is_enum and self.proto.options.map_entry


class _Schema:
    """Types by full name and comments by source-info path, for rendering one file."""

    def __init__(self, file: descriptor_pb2.FileDescriptorProto):
        self.file = file
        self.comments = {tuple(loc.path): loc for loc in file.source_code_info.location}
        self.types: dict[str, _Type] = {}  # by full name, ".package.Name"
        prefix = f".{file.package}." if file.package else "."
        for i, enum in enumerate(file.enum_type):
            self._add(_Type(enum.name, enum, (_FILE_ENUMS, i)), prefix)
        for i, message in enumerate(file.message_type):
            self._add_message(message.name, message, (_FILE_MESSAGES, i), prefix)

    def _add(self, t: _Type, prefix: str) -> None:
        self.types[prefix + t.name] = t

    def _add_message(self, name, message, path, prefix) -> None:
        self._add(_Type(name, message, path), prefix)
        for i, enum in enumerate(message.enum_type):
            self._add(_Type(f"{name}.{enum.name}", enum, path + (_MESSAGE_ENUMS, i)), prefix)
        for i, nested in enumerate(message.nested_type):
            self._add_message(f"{name}.{nested.name}", nested, path + (_MESSAGE_NESTED, i), prefix)

    def comment(self, path: tuple[int, ...]) -> str:
        """The declaration's leading and trailing comments, newlines folded into one line."""
        loc = self.comments.get(path)
        if loc is None:
            return ""
        return " ".join(f"{loc.leading_comments} {loc.trailing_comments}".split())

    def field_type(self, field: descriptor_pb2.FieldDescriptorProto) -> _Type | None:
        return self.types.get(field.type_name) if field.type_name else None

    def map_entry(self, field) -> _Type | None:
        t = self.field_type(field)
        return t if t is not None and t.is_map_entry else None

    def root_type(self, root: str) -> _Type:
        for t in self.types.values():
            if t.name == root and not t.is_enum:
                return t
        raise ValueError(f"{self.file.name}: no message {root}, the config's top level")

    def declared_at(self, t: _Type) -> int:
        """The line of the type's declaration, to list types in file order."""
        return self.comments[t.path].span[0]

    def referenced(self, message: _Type) -> list[tuple[str, _Type]]:
        """(field name, type) of each message or enum the message's fields use, in declaration order;
        a map's entry stands for its value's type."""
        used = []
        for field in message.proto.field:
            entry = self.map_entry(field)
            t = self.field_type(_entry_field(entry, "value") if entry else field)
            if t is not None:
                used.append((field.name, t))
        return used

    def ordered(self, root: str) -> tuple[list[_Type], list[_Type]]:
        """The types reachable from root, depth-first in field order (root first), then the rest in file
        order. Map entries are not types a user writes, so they have no section."""
        reached: dict[str, _Type] = {}

        def visit(t: _Type) -> None:
            if t.name in reached:
                return
            reached[t.name] = t
            if not t.is_enum:
                for _, used in self.referenced(t):
                    visit(used)

        visit(self.root_type(root))
        rest = [t for t in self.types.values() if t.name not in reached and not t.is_map_entry]
        return list(reached.values()), sorted(rest, key=self.declared_at)

    def uses(self, root: str) -> dict[str, list[str]]:
        """Each type's places in a config, as field paths from root ("lc0.index.count_method")."""
        places: dict[str, list[str]] = {}

        def walk(t: _Type, prefix: str, seen: tuple[str, ...]) -> None:
            for field_name, used in self.referenced(t):
                path = f"{prefix}{field_name}"
                places.setdefault(used.name, []).append(path)
                if not used.is_enum and used.name not in seen:  # a recursive message is walked once
                    walk(used, path + ".", seen + (used.name,))

        walk(self.root_type(root), "", (root,))
        return places


def _entry_field(entry: _Type, name: str) -> descriptor_pb2.FieldDescriptorProto:
    """A map entry's `key` or `value` field."""
    return next(f for f in entry.proto.field if f.name == name)


def _anchor(name: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped."""
    return re.sub(r"[^a-z0-9 _-]", "", name.lower()).replace(" ", "-")


def _link(t: _Type) -> str:
    return f"[{t.name}](#{_anchor(t.name)})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


_SCALARS = {
    _FIELD.TYPE_DOUBLE: "double", _FIELD.TYPE_FLOAT: "float", _FIELD.TYPE_INT64: "int64",
    _FIELD.TYPE_UINT64: "uint64", _FIELD.TYPE_INT32: "int32", _FIELD.TYPE_FIXED64: "fixed64",
    _FIELD.TYPE_FIXED32: "fixed32", _FIELD.TYPE_BOOL: "bool", _FIELD.TYPE_STRING: "string",
    _FIELD.TYPE_BYTES: "bytes", _FIELD.TYPE_UINT32: "uint32", _FIELD.TYPE_SFIXED32: "sfixed32",
    _FIELD.TYPE_SFIXED64: "sfixed64", _FIELD.TYPE_SINT32: "sint32", _FIELD.TYPE_SINT64: "sint64",
}


def _type_text(schema: _Schema, field) -> str:
    entry = schema.map_entry(field)
    if entry is not None:
        key, value = _entry_field(entry, "key"), _entry_field(entry, "value")
        value_type = schema.field_type(value)
        # In code, as `<string, ...>` outside it could be read as an HTML tag; a message or enum value is
        # linked after it.
        text = f"`map<{_type_text(schema, key)}, {value_type.name if value_type else _type_text(schema, value)}>`"
        return f"{text} of {_link(value_type)}" if value_type else text
    t = schema.field_type(field)
    name = _link(t) if t is not None else _SCALARS[field.type]
    return f"repeated {name}" if field.label == _FIELD.LABEL_REPEATED else name


def _default_text(field) -> str:
    if not field.HasField("default_value"):
        return "—"
    value = field.default_value
    if field.type in (_FIELD.TYPE_DOUBLE, _FIELD.TYPE_FLOAT):
        value = repr(float(value))  # protoc writes 1.0 as "1"; a double's default reads as one
    elif field.type == _FIELD.TYPE_STRING:
        value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"`{value}`"


def _oneof_of(field) -> int | None:
    """The index of the oneof the field is in, or None. A proto3 `optional` is a synthetic oneof of one
    field: not a choice the user makes."""
    return field.oneof_index if field.HasField("oneof_index") and not field.proto3_optional else None


def _message_section(schema: _Schema, t: _Type) -> list[str]:
    lines = ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    message = t.proto
    for i, field in enumerate(message.field):
        in_oneof = _oneof_of(field)
        if in_oneof is not None and all(_oneof_of(f) != in_oneof for f in message.field[:i]):
            oneof = message.oneof_decl[in_oneof]
            members = ", ".join(f"`{f.name}`" for f in message.field if _oneof_of(f) == in_oneof)
            meaning = schema.comment(t.path + (_MESSAGE_ONEOFS, in_oneof))
            lines.append(f"| `{oneof.name}` (oneof) | one of {members} | — | {_cell(meaning)} |")
        name = f"`{field.name}`"
        meaning = schema.comment(t.path + (_MESSAGE_FIELDS, i))
        if in_oneof is not None:
            meaning = f"In oneof `{message.oneof_decl[in_oneof].name}`. {meaning}".strip()
        lines.append(f"| {name} | {_cell(_type_text(schema, field))} | {_default_text(field)} | "
                     f"{_cell(meaning)} |")
    reserved = [str(r.start) if r.end - r.start == 1 else f"{r.start}..{r.end - 1}" for r in message.reserved_range]
    reserved += [f"`{n}`" for n in message.reserved_name]
    if reserved:
        why = " ".join(schema.comment(t.path + (part,)) for part in (_MESSAGE_RESERVED_RANGES, _MESSAGE_RESERVED_NAMES))
        lines += ["", f"Reserved: {', '.join(reserved)}. {' '.join(why.split())}".rstrip()]
    return lines


def _enum_section(schema: _Schema, t: _Type) -> list[str]:
    lines = ["| value | number | meaning |", "| --- | --- | --- |"]
    for i, value in enumerate(t.proto.value):
        meaning = schema.comment(t.path + (_ENUM_VALUES, i))
        lines.append(f"| `{value.name}` | {value.number} | {_cell(meaning)} |")
    return lines


def render(file: descriptor_pb2.FileDescriptorProto, root: str = ROOT_MESSAGE) -> str:
    """The reference page of one schema: its header comment, then a section per message and enum."""
    schema = _Schema(file)
    reached, rest = schema.ordered(root)
    uses = schema.uses(root)
    header = schema.comments.get((_FILE_SYNTAX,))
    intro = header.leading_comments if header is not None else ""
    paragraphs = [" ".join(p.split()) for p in intro.split("\n\n") if p.strip()]
    out = [
        "# Config reference",
        "",
        f"<!-- Generated from proto/{file.name} by docs/config_reference.py: do not edit; run {REGENERATE} -->",
        "",
        f"Every field of `proto/{file.name}`, from the comments in the schema. A config file is one "
        f"[{root}](#{_anchor(root)}) in protobuf text format; a message field is written as a section "
        "(`output { path: \"out\" }`), a repeated field once per value, a map once per entry "
        "(`column_types { key: \"id\" value: \"int64\" }`). A default is the schema's `[default = ...]`; a field "
        "without one (—) says in its meaning what leaving it unset does.",
        "",
    ]
    for paragraph in paragraphs:
        out += [paragraph, ""]
    out += ["Sections: " + " · ".join(_link(t) for t in reached + rest), ""]
    for t in reached + rest:
        out += [f"## {t.name}", ""]
        about = schema.comment(t.path)
        if about:
            out += [about, ""]
        if t.name == root:
            out += ["The top level of a config file.", ""]
        elif t.name in uses:
            out += ["Set as " + ", ".join(f"`{p}`" for p in uses[t.name]) + ".", ""]
        else:
            out += [f"Not used by {root}.", ""]
        out += (_enum_section if t.is_enum else _message_section)(schema, t)
        out.append("")
    return "\n".join(out)


def stale_message(proto_path: str = PROTO, doc_path: str = DOC) -> str | None:
    """None when doc_path is what proto_path generates; else the one line saying how to fix it."""
    expected = render(read_schema(proto_path))
    try:
        with open(doc_path, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    if current == expected:
        return None
    return f"{os.path.relpath(doc_path, REPO)} is stale: run {REGENERATE}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare docs/config.md with what the proto generates; exit 1 if it differs")
    parser.add_argument("--proto", default=PROTO, help="the schema (default: proto/shardmill_config.proto)")
    args = parser.parse_args(argv)
    try:
        if args.check:
            message = stale_message(args.proto)
            if message:
                print(message, file=sys.stderr)
                return 1
            return 0
        sys.stdout.write(render(read_schema(args.proto)))
    except (ProtocError, ValueError) as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
