"""The config file: defaults, validation messages, the documented file, and re-reading on change."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from roost.config import (
    Config,
    ConfigError,
    DriverProfile,
    HookSettings,
    default_config_text,
    load_config,
    parse_config,
    substitute,
)
from roost.daemon.config_reload import CHANGES_SHOWN, ConfigFile, Reloaded

REPO = Path(__file__).resolve().parents[1]
PACKAGE_FILE = REPO / "roost" / "data" / "roost.toml"
DOCS = REPO / "docs" / "config.md"
CONFIG_FIELDS = [f.name for f in dataclasses.fields(Config) if f.name != "source"]
PI_KEYS = ["command", "provider", "model", "agent_dir", "args", "env", "load_project_extensions", "retry"]
COMMAND_KEYS = ["command", "resume_args", "prompt_via", "max_output", "env"]
HOOK_KEYS = [f.name for f in dataclasses.fields(HookSettings)]


def refused(text: str, source: str = "roost.toml") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, source)
    return info.value


# --- defaults ---------------------------------------------------------------------------------


def test_defaults():
    c = Config()
    assert (c.default_driver, c.idle_timeout, c.subagent_auto_close, c.subagent_auto_close_delay) == ("builtin", 1800.0, True, 3.0)
    assert (c.report_hold_max, c.report_text_max, c.wake_reaped_parent) == (120.0, 4000, False)
    assert (c.max_running_jobs, c.max_depth, c.finished_row_lifetime) == (8, 4, 30.0)
    assert (c.agent_view_subagents, c.notify, c.notify_via, c.theme, c.source) == (
        "hide", ("needs_input",), ("bell",), "textual-dark", None)
    assert c.hooks == HookSettings(None, None, None, 10.0, 4)
    assert sorted(c.drivers) == ["builtin", "pi"]
    assert c.driver("builtin") == DriverProfile("builtin", "builtin", None, {})
    pi = c.driver("pi")
    assert (pi.kind, pi.lifetime) == ("pi", None)
    assert dict(pi.options) == {
        "command": "pi", "provider": "", "model": "", "agent_dir": "", "args": (), "env": {},
        "load_project_extensions": False, "retry": True,
    }


def test_missing_file_or_no_path_gives_defaults(tmp_path):
    assert load_config(None) == Config()
    assert load_config(tmp_path / "nope.toml") == Config()


def test_empty_file_gives_defaults_with_source(tmp_path):
    path = tmp_path / "roost.toml"
    path.write_text("")
    assert load_config(path) == dataclasses.replace(Config(), source=path)


def test_values_are_read(tmp_path):
    path = tmp_path / "roost.toml"
    path.write_text(
        'default_driver = "pi"\nidle_timeout = 90\nsubagent_auto_close = false\n'
        'subagent_auto_close_delay = 0.5\nmax_running_jobs = 0\nmax_depth = 1\n'
        'agent_view_subagents = "inline"\nnotify = []\nnotify_via = ["osc9", "bell"]\ntheme = "textual-light"\n'
        '[drivers.pi]\nmodel = "m"\nargs = ["--x"]\nenv = { A = "1" }\nlifetime = "session"\n'
        '[hooks]\njob_done = ["notify-send", "done"]\ntimeout = 2.5\nmax_running = 1\n'
    )
    c = load_config(path)
    assert c.source == path
    assert c.default_driver == "pi"
    assert c.idle_timeout == 90.0 and isinstance(c.idle_timeout, float)
    assert c.subagent_auto_close is False and c.subagent_auto_close_delay == 0.5
    assert (c.max_running_jobs, c.max_depth) == (0, 1)
    assert (c.agent_view_subagents, c.notify, c.notify_via, c.theme) == ("inline", (), ("osc9", "bell"), "textual-light")
    assert c.hooks == HookSettings(job_done=("notify-send", "done"), timeout=2.5, max_running=1)
    assert c.to_dict()["hooks"]["job_done"] == ["notify-send", "done"] and c.to_dict()["notify_via"] == ["osc9", "bell"]
    pi = c.driver("pi")
    assert pi.lifetime == "session"
    assert pi.options["model"] == "m" and pi.options["args"] == ("--x",) and dict(pi.options["env"]) == {"A": "1"}
    assert pi.options["command"] == "pi" and pi.options["retry"] is True  # defaults filled in
    assert pi.to_dict()["options"]["args"] == ["--x"]


def test_options_are_read_only():
    pi = parse_config('[drivers.pi]\nenv = { A = "1" }\n', "f").driver("pi")
    with pytest.raises(TypeError):
        pi.options["model"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        pi.options["env"]["B"] = "2"  # type: ignore[index]
    assert Config().driver("pi").options["env"] == {}


# --- wrong types and values -----------------------------------------------------------------

BAD_VALUES = [
    ('idle_timeout = "ten"', "idle_timeout", "expected a number of seconds, got string 'ten'"),
    ("idle_timeout = -1", "idle_timeout", "expected a number of seconds >= 0, got integer -1"),
    ("idle_timeout = true", "idle_timeout", "expected a number of seconds, got boolean true"),
    ("idle_timeout = nan", "idle_timeout", "expected a finite number of seconds, got float nan"),
    ("subagent_auto_close_delay = 0", "subagent_auto_close_delay", "expected a number of seconds > 0, got integer 0"),
    ("report_hold_max = [1]", "report_hold_max", "expected a number of seconds, got an array"),
    ("finished_row_lifetime = -0.5", "finished_row_lifetime", "expected a number of seconds >= 0, got float -0.5"),
    ("double_press_window = 0", "double_press_window", "expected a number of seconds > 0, got integer 0"),
    ('subagent_auto_close = "yes"', "subagent_auto_close", "expected true or false, got string 'yes'"),
    ("wake_reaped_parent = 1", "wake_reaped_parent", "expected true or false, got integer 1"),
    ("max_running_jobs = 2.5", "max_running_jobs", "expected an integer >= 0, got float 2.5"),
    ("max_running_jobs = -1", "max_running_jobs", "expected an integer >= 0, got integer -1"),
    ("max_depth = 0", "max_depth", "expected an integer >= 1, got integer 0"),
    ("report_text_max = false", "report_text_max", "expected an integer >= 0, got boolean false"),
    ('agent_view_subagents = "inlne"', "agent_view_subagents", "expected one of 'hide', 'inline', got string 'inlne' (did you mean 'inline'?)"),
    ('notify = "none"', "notify", "expected an array of 'needs_input', 'failed', 'done', got string 'none' (to notify nothing: notify = [])"),
    ('notify = "failed"', "notify", "expected an array of 'needs_input', 'failed', 'done', got string 'failed' (did you mean [\"failed\"]?)"),
    ('notify = ["faild"]', "notify[0]", "expected one of 'needs_input', 'failed', 'done', got string 'faild' (did you mean 'failed'?)"),
    ('notify = ["done", "done"]', "notify[1]", "'done' is listed twice"),
    ('notify_via = ["osc99"]', "notify_via[0]", "expected one of 'bell', 'osc9', 'osc777', got string 'osc99'"),
    ('notify_via = "bell"', "notify_via", "expected an array of 'bell', 'osc9', 'osc777', got string 'bell' (did you mean [\"bell\"]?)"),
    ("hooks = 1", "hooks", "expected a table ([hooks]), got integer 1"),
    ('[hooks]\njob_done = "notify-send done"', "hooks.job_done", "expected an array of strings, got string 'notify-send done'"),
    ("[hooks]\njob_failed = []", "hooks.job_failed", "expected a non-empty array of strings, got an empty array"),
    ("[hooks]\ntimeout = 0", "hooks.timeout", "expected a number of seconds > 0, got integer 0"),
    ("[hooks]\nmax_running = 0", "hooks.max_running", "expected an integer >= 1, got integer 0"),
    ("theme = 3", "theme", "expected a Textual theme name, got integer 3"),
    ("default_driver = 1", "default_driver", "expected a string, got integer 1"),
    ("drivers = 1", "drivers", "expected a table of drivers ([drivers.NAME] tables), got integer 1"),
    ("drivers.x = 1", "drivers.x", "expected a table ([drivers.x]), got integer 1"),
    ('[drivers.pi]\nlifetime = "forever"', "drivers.pi.lifetime", "expected one of 'task', 'workflow', 'session', got string 'forever'"),
    ("[drivers.pi]\ncommand = 3", "drivers.pi.command", "expected a string, got integer 3"),
    ('[drivers.pi]\nargs = "--x"', "drivers.pi.args", "expected an array of strings, got string '--x'"),
    ('[drivers.pi]\nargs = ["a", 2]', "drivers.pi.args[1]", "expected a string, got integer 2"),
    ("[drivers.pi]\nenv = { A = 1 }", "drivers.pi.env.A", "expected a string, got integer 1"),
    ('[drivers.pi]\nretry = "no"', "drivers.pi.retry", "expected true or false, got string 'no'"),
    ('[drivers.pi]\nload_project_extensions = 0', "drivers.pi.load_project_extensions", "expected true or false, got integer 0"),
    ('[drivers.c]\nkind = "command"\ncommand = []', "drivers.c.command", "expected a non-empty array of strings, got an empty array"),
    ('[drivers.c]\nkind = "command"\ncommand = "claude -p"', "drivers.c.command", "expected an array of strings, got string 'claude -p'"),
    ('[drivers.c]\nkind = "command"\ncommand = ["a", "{promt}"]', "drivers.c.command[1]", "unknown placeholder '{promt}' (did you mean '{prompt}'?)"),
    ('[drivers.c]\nkind = "command"\ncommand = ["a", "{prompt}"]\nresume_args = ["-r", 7]', "drivers.c.resume_args[1]", "expected a string, got integer 7"),
    ('[drivers.c]\nkind = "command"\ncommand = ["a", "{prompt}"]\nprompt_via = "pipe"', "drivers.c.prompt_via", "expected one of 'arg', 'stdin', got string 'pipe'"),
    ('[drivers.c]\nkind = "command"\ncommand = ["a"]', "drivers.c.command", "expected an element containing '{prompt}' when prompt_via = 'arg'"),
    ('[drivers.pi]\nkind = "command"', "drivers.pi.kind", "expected 'pi'"),
]


@pytest.mark.parametrize(("text", "key", "expected"), BAD_VALUES, ids=[k for _, k, _ in BAD_VALUES])
def test_wrong_value_is_refused_naming_file_key_and_expectation(text, key, expected):
    err = refused(text, "/home/me/roost.toml")
    assert err.file == "/home/me/roost.toml"
    assert err.key == key
    assert err.message.startswith(expected)
    assert str(err).startswith(f"/home/me/roost.toml: key '{key}': {expected}")


def test_error_survives_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(refused("max_depth = 0")))
    assert (err.file, err.key) == ("roost.toml", "max_depth")


# --- unknown keys, kinds and drivers -------------------------------------------------------


def test_unknown_top_level_key_suggests_the_close_one():
    err = refused("idle_timout = 10", "f.toml")
    assert str(err) == "f.toml: key 'idle_timout': unknown key (did you mean 'idle_timeout'?)"


def test_unknown_top_level_key_without_close_match_lists_the_keys():
    err = refused("colour = 1")
    assert err.key == "colour"
    assert "known keys:" in err.message and "idle_timeout" in err.message and "drivers" in err.message


def test_unknown_key_in_hooks_suggests():
    err = refused('[hooks]\njob_fail = ["x"]', "f.toml")
    assert str(err) == "f.toml: key 'hooks.job_fail': unknown key in [hooks] (did you mean 'job_failed'?)"
    assert "known keys: job_needs_input, job_done, job_failed, timeout, max_running" in refused("[hooks]\nx = 1").message


def test_unknown_key_inside_drivers_pi_suggests():
    err = refused('[drivers.pi]\nmodle = "x"', "f.toml")
    assert err.key == "drivers.pi.modle"
    assert str(err) == "f.toml: key 'drivers.pi.modle': unknown key for a 'pi' driver (did you mean 'model'?)"


def test_key_of_another_kind_says_so():
    err = refused('[drivers.pi]\nresume_args = ["x"]')
    assert err.key == "drivers.pi.resume_args"
    assert "'resume_args' is a key of kind 'command'" in err.message


def test_builtin_driver_takes_no_options():
    err = refused('[drivers.builtin]\nmodel = "x"')
    assert err.key == "drivers.builtin.model"
    assert err.message.startswith("unknown key for a 'builtin' driver")


def test_unknown_driver_kind():
    err = refused('[drivers.x]\nkind = "shell"')
    assert err.key == "drivers.x.kind"
    assert err.message == "expected one of 'builtin', 'pi', 'command', 'claude', 'codex', got string 'shell'"


def test_new_driver_needs_a_kind():
    err = refused('[drivers.opus]\nmodel = "o"')
    assert err.key == "drivers.opus.kind"
    assert err.message.startswith("missing; expected one of 'builtin', 'pi', 'command'")


def test_bad_driver_name():
    err = refused('[drivers."my agent"]\nkind = "pi"')
    assert err.key == 'drivers."my agent"'
    assert "letters, digits" in err.message


def test_command_driver_missing_command():
    err = refused('[drivers.claude]\nkind = "command"\nresume_args = ["--resume", "{session}"]', "f.toml")
    assert err.key == "drivers.claude.command"
    assert err.message.startswith("missing; expected a non-empty array of strings")


def test_command_driver_defaults_and_placeholders():
    c = parse_config(
        'default_driver = "claude"\n[drivers.claude]\nkind = "command"\n'
        'command = ["claude", "-p", "{prompt}", "--json={\\"a\\": 1}"]\nresume_args = ["--resume", "{session}"]\n',
        "f",
    )
    claude = c.driver(c.default_driver)
    assert (claude.kind, claude.lifetime) == ("command", None)
    assert claude.options["command"] == ("claude", "-p", "{prompt}", '--json={"a": 1}')
    assert claude.options["resume_args"] == ("--resume", "{session}")
    assert claude.options["prompt_via"] == "arg" and dict(claude.options["env"]) == {}
    assert sorted(c.drivers) == ["builtin", "claude", "pi"]  # the built-in ones are still there


def test_stdin_command_driver_needs_no_prompt_placeholder():
    c = parse_config('[drivers.a]\nkind = "command"\ncommand = ["agent"]\nprompt_via = "stdin"\n', "f")
    assert c.driver("a").options["prompt_via"] == "stdin"


def test_another_pi_profile():
    c = parse_config('[drivers.pi-opus]\nkind = "pi"\nmodel = "opus"\nlifetime = "workflow"\n', "f")
    opus = c.driver("pi-opus")
    assert (opus.kind, opus.lifetime, opus.options["model"], opus.options["command"]) == ("pi", "workflow", "opus", "pi")
    assert c.driver("pi").options["model"] == ""


def test_substitute_fills_placeholders_once():
    values = {"prompt": "fix {cwd}", "session": "s1", "cwd": "/w"}
    assert substitute("--p={prompt}", values) == "--p=fix {cwd}"
    assert substitute("{session}:{cwd}", values) == "s1:/w"
    assert substitute("{session}", {}) == ""
    assert substitute('{"a": 1}', values) == '{"a": 1}'


def test_default_driver_unknown():
    err = refused('default_driver = "claud"\n[drivers.claude]\nkind = "command"\ncommand = ["claude", "{prompt}"]', "f.toml")
    assert err.key == "default_driver"
    assert err.message == "unknown driver 'claud' (did you mean 'claude'? known drivers: builtin, claude, pi)"


def test_config_driver_lookup_of_unknown_name():
    with pytest.raises(ConfigError) as info:
        Config().driver("bultin")
    assert info.value.key == "drivers.bultin"
    assert "did you mean 'builtin'?" in info.value.message and "known drivers: builtin, pi" in info.value.message


def test_check_theme_against_the_apps_themes():
    themes = ["textual-dark", "textual-light", "nord"]
    parse_config('theme = "nord"', "f").check_theme(themes)  # accepted
    with pytest.raises(ConfigError) as info:
        parse_config('theme = "textual-lite"', "f.toml").check_theme(themes)
    assert (info.value.file, info.value.key) == ("f.toml", "theme")
    assert "did you mean 'textual-light'?" in info.value.message


# --- files ------------------------------------------------------------------------------------------


def test_toml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "roost.toml"
    path.write_text("max_depth = 3\n\nidle timeout = 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.file == str(path) and err.key == ""
    assert "line 3" in err.message
    assert str(err).startswith(f"{path}: invalid TOML: ")


def test_unreadable_and_non_utf8_files_are_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)  # a directory
    assert info.value.file == str(tmp_path) and "cannot read" in info.value.message
    path = tmp_path / "roost.toml"
    path.write_bytes(b"theme = '\xff'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "not UTF-8" in info.value.message


# --- the documented file and the docs -------------------------------------------------------


def test_shipped_file_is_the_defaults():
    assert default_config_text() == PACKAGE_FILE.read_text(encoding="utf-8")
    assert parse_config(default_config_text(), str(PACKAGE_FILE)) == dataclasses.replace(Config(), source=PACKAGE_FILE)


def test_repo_config_file_is_the_shipped_one():
    link = REPO / "config" / "roost.toml"
    assert link.is_symlink()
    assert link.resolve() == PACKAGE_FILE.resolve()


def _uncommented(text: str) -> str:
    """The file with every commented-out setting and table header switched on."""
    setting = re.compile(r"^# ((?:[a-z_]+ = .+)|(?:\[drivers\.[a-z_-]+\])|(?:\[hooks\])|(?:\[worktree\]))$")
    return "\n".join(setting.sub(r"\1", line) for line in text.splitlines()) + "\n"


def test_documented_values_are_the_defaults():
    text = _uncommented(default_config_text())
    assert text.count("\ndefault_driver = ") == 1  # the uncommenting did something
    c = parse_config(text, "uncommented")
    assert dataclasses.replace(c, drivers=Config().drivers, source=None) == Config()
    assert c.driver("builtin") == Config().driver("builtin")
    assert c.driver("pi") == Config().driver("pi")
    assert c.driver("claude").kind == "claude"
    assert dict(c.driver("claude").options) == dict(parse_config('[drivers.claude]\nkind = "claude"', "t").driver("claude").options)
    aider = c.driver("aider")
    assert aider.kind == "command"
    assert aider.options["command"] == ("aider", "--yes-always", "--message", "{prompt}")
    assert aider.options["resume_args"] == ("--resume", "{session}")
    assert c.driver("pi-opus").kind == "pi"
    assert c.hooks == Config().hooks
    assert c.worktree == Config().worktree


@pytest.mark.parametrize("doc", [PACKAGE_FILE, DOCS], ids=["roost.toml", "config.md"])
def test_every_key_is_documented(doc):
    text = doc.read_text(encoding="utf-8")
    missing = [k for k in [*CONFIG_FIELDS, "kind", "lifetime", *PI_KEYS, *COMMAND_KEYS, *HOOK_KEYS]
               if not re.search(rf"\b{k}\b", text)]
    assert missing == []
    for placeholder in ("{prompt}", "{session}", "{cwd}"):
        assert placeholder in text


def test_docs_give_each_default():
    docs = DOCS.read_text(encoding="utf-8")
    c = Config()
    for name in CONFIG_FIELDS:
        if name in ("drivers", "hooks", "worktree", "hosts", "prices"):
            continue
        if getattr(c, name) is None:  # no default: the docs say unset
            assert re.search(rf"\| `{name}` \|[^\n]*\| unset \|", docs), name
            continue
        assert re.search(rf"\| `{name}` \|[^\n]*\| `{re.escape(_shown(getattr(c, name)))}` \|", docs), name
    for name in ("timeout", "max_running"):
        assert re.search(rf"\| `{name}` \|[^\n]*\| `{_shown(getattr(c.hooks, name))}` \|", docs), name
    for name in ("copy", "setup", "teardown", "setup_timeout", "dir"):
        assert re.search(rf"\| `{name}` \|[^\n]*\| `{re.escape(_shown(getattr(c.worktree, name)))}` \|", docs), name


def _shown(value: object) -> str:
    """A default as the docs write it in TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if isinstance(value, int):  # whole, however large (a byte count)
        return str(value)
    return f"{value:g}"


# --- re-reading on change ---------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    """Write and move the mtime on, so a change is seen even on a coarse-clock filesystem."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, max(st.st_mtime_ns, before + 1_000_000_000)))


def test_a_reload_says_what_changed_keeps_the_old_on_broken_and_recovers(tmp_path):
    path = tmp_path / "roost.toml"
    _write(path, "max_depth = 2\n")
    held = ConfigFile(path)
    assert held.config.max_depth == 2 and held.last_error is None
    assert held.reload() == Reloaded((), None, str(path))  # nothing changed

    _write(path, 'max_depth = 3\n[drivers.pi]\nmodel = "m"\n')
    assert held.reload().changed == ("drivers.pi.options.model", "max_depth")
    assert held.config.max_depth == 3

    _write(path, "max_depth = 0\n")
    broken = held.reload()
    assert broken.changed == () and broken.to_dict()["reloaded"] is False and "max_depth" in broken.error
    assert held.config.max_depth == 3  # the last good one stays
    assert held.last_error is not None and held.last_error.key == "max_depth"

    _write(path, "max_depth = [\n")
    assert "invalid TOML" in held.reload().error

    _write(path, "max_depth = 5\n")
    assert held.reload().changed == ("drivers.pi.options.model", "max_depth")
    assert held.config.max_depth == 5 and held.last_error is None


def test_a_reload_sees_a_file_appear_and_go(tmp_path):
    path = tmp_path / "roost.toml"
    held = ConfigFile(path)
    assert held.config == Config()
    _write(path, "notify = []\n")
    assert held.reload().changed == ("notify",) and held.config.notify == ()
    path.unlink()
    assert held.reload().changed == ("notify",) and held.config == Config()


@pytest.mark.parametrize("count", [CHANGES_SHOWN, CHANGES_SHOWN + 3])
def test_a_reload_names_at_most_its_limit_of_changed_keys(tmp_path, count):
    path = tmp_path / "roost.toml"
    held = ConfigFile(path)
    _write(path, "".join(f'[drivers.p{n:03}]\nkind = "builtin"\n' for n in range(count)))
    shown = held.reload().to_dict()["changed"]
    if count == CHANGES_SHOWN:
        assert shown == [f"drivers.p{n:03}" for n in range(count)]
    else:
        assert len(shown) == CHANGES_SHOWN + 1 and shown[-1] == f"… and {count - CHANGES_SHOWN} more"


def test_a_broken_file_is_refused_at_start(tmp_path):
    path = tmp_path / "roost.toml"
    path.write_text("notify = 1\n")
    with pytest.raises(ConfigError) as info:
        ConfigFile(path)
    assert info.value.key == "notify"
