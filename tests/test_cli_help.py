"""``owt --help`` is complete: every subcommand has a description, every option a help text,
and every option with a default says it."""

from __future__ import annotations

import argparse

import pytest

from openwebtext.cli import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _shown(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS
    ]


def _has_default(action: argparse.Action) -> bool:
    default = action.default
    if default is None or isinstance(default, bool) or default == argparse.SUPPRESS:
        return False
    return not (isinstance(default, list | tuple) and not default)


def test_every_subcommand_is_listed() -> None:
    assert set(_subcommands()) == {"stream", "index", "tokenize", "merge", "bench", "synth"}


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_has_a_description(name: str) -> None:
    parser = _subcommands()[name]
    assert parser.description and len(parser.description) > 40, name


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_option_has_a_help_text(name: str) -> None:
    missing = [a.dest for a in _shown(_subcommands()[name]) if not (a.help or "").strip()]
    assert missing == [], f"owt {name}: no help for {missing}"


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_default_is_shown(name: str) -> None:
    silent = [
        a.dest
        for a in _shown(_subcommands()[name])
        if _has_default(a) and "default" not in (a.help or "")
    ]
    assert silent == [], f"owt {name}: defaults not shown for {silent}"


def test_the_help_of_every_subcommand_renders() -> None:
    for name, parser in _subcommands().items():
        text = parser.format_help()
        assert text.startswith(f"usage: owt {name}"), name
