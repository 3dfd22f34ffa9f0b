"""Every ``sagacity`` command the documentation names, checked against the CLI itself.

A shell block's commands (and ``$(...)`` inside them), and every inline code span of prose that
starts with ``sagacity``, are parsed by click's own parser for the command they name: an
unknown command or option, or arguments the command does not take, is a finding. Nothing is
run, so this holds for blocks that are not run (production paths, other hosts) as well.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

import click

from tests.docs._blocks import ROOT, Block

_SEPARATORS = frozenset({";", "&", "&&", "|", "||", "(", ")", "|&"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_INLINE = re.compile(r"(?<!`)`(sagacity [^`\n]+)`(?!`)")


@dataclass(frozen=True)
class Command:
    """A ``sagacity`` invocation found in a page."""

    where: str
    argv: tuple[str, ...]
    """The arguments after ``sagacity``."""
    inline: bool = False
    """From prose (a synopsis: alternatives and placeholders after the command path)."""

    def __str__(self) -> str:
        return f"{self.where}: sagacity {' '.join(self.argv)}"


_PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\n]*>")


def _tokens(line: str) -> list[str]:
    line = _PLACEHOLDER.sub("PLACEHOLDER", line)  # `--public-key <hex>`: a value, no redirection
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: take the words as they come
        return line.split()


def _simple_commands(text: str) -> Iterator[list[str]]:
    """The simple commands of shell ``text``, those inside ``$(...)`` included."""
    for line in text.replace("\\\n", " ").splitlines():
        current: list[str] = []
        for token in _tokens(line):
            if token in _SEPARATORS or set(token) <= set("<>&|"):
                if current:
                    yield current
                current = []
                continue
            for inner in re.findall(r"\$\(([^()]*)\)", token):
                yield from _simple_commands(inner)
            current.append(token)
        if current:
            yield current


def _is_sagacity(word: str) -> bool:
    return word == "sagacity" or word.endswith("/sagacity")


def in_block(block: Block) -> list[Command]:
    """The ``sagacity`` commands of a shell block."""
    found = []
    for words in _simple_commands(block.text):
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]  # VAR=value sagacity …
        if words and words[0] == "exec":
            words = words[1:]
        if words and _is_sagacity(words[0]):
            found.append(Command(where=block.where, argv=tuple(words[1:])))
    return found


def in_prose(page: str) -> list[Command]:
    """The inline code spans of ``page`` that name a ``sagacity`` command."""
    text = (ROOT / page).read_text(encoding="utf-8")
    prose = re.sub(r"^( *)```.*?^\1```", "", text, flags=re.DOTALL | re.MULTILINE)
    found = []
    for match in _INLINE.finditer(prose):
        line = prose.count("\n", 0, match.start()) + 1
        # A synopsis: `[--saga ID | --all]` brackets dropped, `{a,b}` one command per name.
        words = [w.strip("[]") for w in _tokens(match.group(1))[1:]]
        words = [w for w in words if w]
        where = f"{page} (prose, near line {line})"
        for index, word in enumerate(words):
            if word.startswith("{") and word.endswith("}"):
                found.extend(
                    Command(where=where, argv=(*words[:index], name), inline=True)
                    for name in word[1:-1].split(",")
                )
                break
        else:
            found.append(Command(where=where, argv=tuple(words), inline=True))
    return found


def problem(command: Command, root: click.Group) -> str | None:
    """Why ``command`` is not a command of ``root`` as written, or ``None``."""
    ctx = click.Context(root, info_name="sagacity")
    current: click.Command = root
    args = list(command.argv)
    path = ["sagacity"]
    while True:
        if command.inline and not isinstance(current, click.Group):
            # A synopsis: its options must exist; what follows may be placeholders.
            unknown = [
                a.split("=")[0]
                for a in args
                if a.startswith("-") and a.split("=")[0] not in _option_names(current, ctx)
            ]
            return f"{' '.join(path)} has no option {unknown[0]}" if unknown else None
        for stop in ("|", "…"):
            if command.inline and stop in args:
                args = args[: args.index(stop)]  # alternatives, or "and so on", follow
        try:
            _opts, rest, _order = current.make_parser(ctx).parse_args(args=args)
        except click.UsageError as exc:
            return f"{' '.join(path)}: {exc.format_message()}"
        if isinstance(current, click.Group):
            if not rest:
                return None  # the group alone (its --help, or a mention)
            sub = current.get_command(ctx, rest[0])
            if sub is None:
                return f"{' '.join(path)} has no command {rest[0]!r}"
            path.append(rest[0])
            ctx = click.Context(sub, info_name=rest[0], parent=ctx)
            current, args = sub, rest[1:]
            continue
        if rest:
            return f"{' '.join(path)} takes no further argument {rest[0]!r}"
        return None


def _option_names(command: click.Command, ctx: click.Context) -> set[str]:
    names = {"--help", "-h"}
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names
