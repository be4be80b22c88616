"""Settings: flags > FTCLI_* environment > config file > gcloud's own defaults; every problem at once, each naming
where its value came from (`effective` keeps the source of each value; `ftcli config list` shows them).

The config file is TOML at `<user config dir>/ftcli/config.toml` (FTCLI_CONFIG overrides the path);
`ftcli config set/get/list/unset` edits it.
"""

from __future__ import annotations

import configparser
import contextlib
import errno
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from ftcli.errors import FtcliError, UsageError, reason
from ftcli.spelling import near
from ftcli_trainer.storage import split_gcs

REGION_FIELD = "{region}"  # in a bucket value, stands for the job's region
KEYS = ("project", "region", "bucket", "service_account", "image_mirror")
DEFAULT_REGION = "us-central1"
# The names Vertex AI's own SDK gives two of them: `aiplatform.init(project=, location=, staging_bucket=,
# service_account=)` (google-cloud-aiplatform 2.7.0, google/cloud/aiplatform/initializer.py, read 2026-11-29). A
# config written from a notebook's init call had `location = "europe-west4"`, which no spelling rule finds near
# `region`, and the job went to us-central1.
ALIASES = {"location": "region", "staging_bucket": "bucket"}
# A project ID "must be 6 to 30 lowercase ASCII letters, digits, or hyphens. It must start with a letter. Trailing
# hyphens are prohibited" (Resource Manager REST, Project.projectId,
# https://cloud.google.com/resource-manager/reference/rest/v3/projects, read 2026-11-27; the same words in the
# google-cloud-resourcemanager Java reference, ProjectInfo.Builder.setProjectId, read 2026-11-28); a domain-scoped
# id keeps its "example.com:" prefix; a project number is all digits.
_ID_6_30 = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"  # a project id; also IAM's service account name (SA_ID_RE)
PROJECT_ID_RE = re.compile(rf"^{_ID_6_30}$")
PROJECT_RE = re.compile(rf"^(?:[a-z][a-z0-9.-]*:)?{_ID_6_30}$|^\d{{6,20}}$")  # id or number
# Bucket names (Cloud Storage "Bucket naming guidelines", https://cloud.google.com/storage/docs/naming-buckets, read
# 2026-11-27): "only lowercase letters, numbers, dashes (-), underscores (_), and dots (.)"; "must start and end with
# a number or letter"; "must contain 3-63 characters. Names containing dots can contain up to 222 characters, but
# each dot-separated component can be no longer than 63 characters"; "cannot be represented as an IP address in
# dotted-decimal notation"; "cannot begin with the "goog" prefix"; "cannot contain "google" or close misspellings,
# such as "g00gle"" (check_bucket).
BUCKET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
_IP_ADDRESS = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
# "google" and its close misspellings: o/0 for each o, l/1 for the l (Google gives "g00gle" as the example).
_GOOGLE_LIKE = re.compile(r"g[o0][o0]g[l1]e")
# A user-managed service account is NAME@PROJECT.iam.gserviceaccount.com; Compute Engine's default one is
# PROJECT_NUMBER-compute@developer.gserviceaccount.com ("Service account types",
# https://cloud.google.com/iam/docs/service-account-types, read 2026-11-27); App Engine's default one is
# PROJECT_ID@appspot.gserviceaccount.com ("Configure App Engine service accounts",
# https://docs.cloud.google.com/appengine/docs/standard/configure-service-accounts, read 2026-11-27). A CustomJob
# runs as any of them ("Users submitting jobs must have act-as permission on this run-as account",
# CustomJobSpec.service_account in the installed aiplatform_v1, google-cloud-aiplatform 2.7.0).
SA_RE = re.compile(r"^[^@\s]+@[^@\s]+\.iam\.gserviceaccount\.com$"
                   r"|^[^@\s]+@(?:developer|appspot)\.gserviceaccount\.com$")
# The name of a user-managed one (its account id) "must be 6-30 characters long, and match the regular expression
# [a-z]([-a-z0-9]*[a-z0-9])" (IAM REST reference, projects.serviceAccounts.create, accountId,
# https://cloud.google.com/iam/reference/rest/v1/projects.serviceAccounts/create, read 2026-11-27); no other name
# is ever created. Service agents (NAME@gcp-sa-SERVICE.iam.gserviceaccount.com) are Google's, and left alone; so is
# a PROJECT with a dot in it (a domain-scoped project's), whose form ftcli does not check. A PROJECT without one is
# a project id, as PROJECT_RE's comment says.
SA_ID_RE = PROJECT_ID_RE  # the same rule, word for word
ON_WINDOWS = os.name == "nt"
# What the config file holds that ftcli ignores: said through logging, as the trainer's own warnings are, so that the
# command renders it (output.route_warnings, once a command) and the core stays free of the terminal.
_log = logging.getLogger("ftcli.settings")


def env_path(var: str) -> Path | None:
    """The path an FTCLI_* variable names, or None when it is unset or empty. A `~` is the home folder: a variable
    set where no shell expands it (a Dockerfile's ENV, a systemd unit, a .env file, `FTCLI_CONFIG="~/..."` quoted)
    made a folder named `~` in whatever folder the command ran from, and the next command, run elsewhere, did not
    find the settings. A relative path is made absolute, so the messages name the file that was used."""
    value = os.environ.get(var)
    return Path(value).expanduser().absolute() if value else None


def config_path() -> Path:
    if path := env_path("FTCLI_CONFIG"):
        return path
    from platformdirs import user_config_dir

    return Path(user_config_dir("ftcli")) / "config.toml"


def config_entries() -> dict:
    """The config file's top-level entries as TOML reads them, settings or not ({} when there is no file); a path
    that is not a file, or a file that is not TOML, is refused as every command refuses it. No entry is checked:
    this is what `config unset` removes a key ftcli does not read from, a misspelled one included, which
    load_config_file refuses."""
    path = config_path()
    if not path.exists():
        return {}
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else f"{_file_kind(path)}, not a regular file"
        raise UsageError(f"the config file {path} is {what}", hint="point FTCLI_CONFIG at a file (it need not "
                         "exist yet)")
    import tomllib
    try:
        return tomllib.loads(toml_text(path))
    except OSError as e:
        # A read error that names no file (EIO on a failing disk or a stale network mount) was one line saying
        # "Input/output error", not which file: every command reads this one first.
        if not e.filename:
            e.filename = str(path)
        raise
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path} is not valid TOML ({e})", hint=f"fix or delete {path}") from None


def load_config_file() -> dict[str, str]:
    return _settings_of(config_entries(), config_path())


def _settings_of(data: dict, path: Path) -> dict[str, str]:
    """The settings of the config file `path`, whose top-level entries are `data`, refused as every command refuses
    them (a misspelled key, a setting inside a table, a value of the wrong type), with a warning of a key ftcli does
    not read."""
    if typos := [(k, near) for k in data if k not in KEYS and (near := near_key(k))]:
        key, near = typos[0]
        raise UsageError(f"{path}: unknown {_entry(key, data[key])}; did you mean {near}?",
                         hint=f"rename it in {path} (ftcli reads {', '.join(KEYS)}, at the top of the file)")
    if nested := next(_settings_in_tables(data), None):
        # A line appended after a [table] belongs to that table (`echo 'region = "europe-west4"' >> config.toml`
        # below a [notes] one), and a [ftcli] or [default] table reads like a profile: either way the setting was
        # not read, and the job went to the default region.
        table, key, near = nested
        said = key if key == near else f"{key!r} (did you mean {near}?)"
        raise UsageError(f"{path}: {said} is inside the {table}, where ftcli does not read it",
                         hint=f"move it above the file's first [table] line: ftcli reads {', '.join(KEYS)} only at "
                              "the top of the file")
    # A list, table, boolean or date was read as its Python text (`region = ["us-central1"]` was "unknown Vertex AI
    # region \"['us-central1']\"", `region = true` the region 'True'); a number stays a value (a project number).
    if wrong := next(((k, v) for k, v in data.items() if k in KEYS and (isinstance(v, bool) or not isinstance(
            v, (str, int)))), None):
        key, value = wrong
        kind = ("true/false" if isinstance(value, bool) else "an array of tables" if _array_of_tables(value)
                else "a list" if isinstance(value, list) else "a table" if isinstance(value, dict)
                else "a decimal number" if isinstance(value, float) else "a date or time")
        raise UsageError(f"{path}: {key} must be a string, not {kind}", hint=f'write it in quotes: {key} = "VALUE"')
    if unknown := [_entry(k, v) for k, v in data.items() if k not in KEYS]:
        # A warning, not an error: every command reads this file, and a key no setting is near (a newer ftcli's, a
        # note of the user's) must not stop `ftcli logs` or `ftcli jobs cancel`; but it is said, since it changes
        # nothing. A key near a setting, a setting inside a table and a value of the wrong type are refused above:
        # there the user meant a setting, and the job would run without it.
        # The hint names the command that removes each one: `config unset zone` refused it as an unknown setting,
        # and the file had to be edited by hand.
        import shlex

        unset = [f"`ftcli config unset {shlex.quote(k)}`" for k in data if k not in KEYS]
        them = ("it", "it a comment") if len(unset) == 1 else ("them", "them comments")
        _log.warning(f"{path}: ftcli ignores the unknown {and_list(unknown)}",
                     extra={"hint": f"ftcli reads {', '.join(KEYS)}; remove {them[0]} with {and_list(unset)}, or make "
                                    f"{them[1]} (#)"})
    return {k: str(v) for k, v in data.items() if k in KEYS}


def _entry(key: str, value: object) -> str:
    """What a top-level entry of the config file is, named as the file writes it: key 'team', table [notes], array of
    tables [[profiles]]. A [[profiles]] array (what a profile per region looks like in TOML) was "the unknown key
    'profiles'", though the file has no such key line."""
    if isinstance(value, dict):
        return f"table [{key}]"
    return f"array of tables [[{key}]]" if _array_of_tables(value) else f"key {key!r}"


def _array_of_tables(value: object) -> bool:
    """Whether tomllib read `value` from an array of tables: [[NAME]] headers, or `NAME = [{...}]`, which it reads
    alike (and which is named [[NAME]] too)."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _settings_in_tables(data: dict, table: str = "") -> Iterator[tuple[str, str, str]]:
    """(the table as _entry names it, key, the setting it names) for each key inside a table or an array of tables,
    at any depth, that names a setting or is near one. A [[profiles]] table with `region = ...` under it was only an
    unknown entry: the region was not read, and the job went to the default one."""
    for k, v in data.items():
        # (a top-level [region] or [[region]] is a value of the wrong type)
        if (isinstance(v, dict) or _array_of_tables(v)) and (table or k not in KEYS):
            inner = f"{table}.{k}" if table else k
            for each in [v] if isinstance(v, dict) else v:
                for key in each:
                    if not isinstance(each[key], dict) and (near := near_key(key)):
                        yield _entry(inner, v), key, near
                yield from _settings_in_tables(each, inner)


def and_list(items: list[str], word: str = "and") -> str:
    """`a`, `a and b`, `a, b and c` (`word`: "or" for choices), in the messages of settings and of --restart."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def toml_text(path: Path) -> str:
    """The text of a TOML file the user writes (the config file, the price file), a byte-order mark taken as what it
    says. Windows PowerShell writes one: "In Windows PowerShell, any Unicode encoding, except UTF7, always creates a
    BOM" ("about_Character_Encoding",
    https://learn.microsoft.com/powershell/module/microsoft.powershell.core/about/about_character_encoding, read
    2026-11-29 in its zh-CN rendering, 在 Windows PowerShell 中,除 UTF7 之外的任何 Unicode 编码都是会创建 BOM), and its
    Out-File, which `>` stands for, writes UTF-16LE unless told otherwise (its -Encoding: "Unicode is the default",
    the Windows PowerShell 5.1 reference as quoted on forums.powershell.org, "Why does Powershell output unix text?
    (really utf-16)", read 2026-11-29). tomllib takes neither: `"region = ..." | Out-File -Encoding utf8` gave "not
    valid TOML (Invalid statement (at line 1, column 1))" for a line that looks right, and `> config.toml` a UTF-8
    decoding error."""
    data = path.read_bytes()
    bom, codec = _text_form(data)
    return data[len(bom):].decode(codec)


def _text_form(data: bytes) -> tuple[bytes, str]:
    """The byte-order mark a text file starts with (b"" for none) and the codec of the rest: what toml_text reads it
    with, and what `config set` writes it back with."""
    import codecs

    marks = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
    return next(((bom, codec) for bom, codec in marks if data.startswith(bom)), (b"", "utf-8"))


_LONE_LF = re.compile(r"(?<!\r)\n")


def _toml_edited(data: bytes, values: dict[str, str | None]) -> bytes:
    """The bytes of a TOML file (`data`, b"" for a new one) with these keys set (or, with None, removed), and nothing
    else changed. tomlkit keeps what it parsed as it was, but ends what it adds (a new key's line, a line break after
    a last line that had none, a blank line before a table) with "\n", and dumps str: a file Windows Notepad or
    PowerShell wrote, with CRLF line breaks, came back with one LF-ended line among them, and its byte-order mark (and
    UTF-16, PowerShell's `>`: toml_text) was dropped. A file whose every line break is CRLF gets CRLF ones; one that
    mixes them keeps its own and gets LF ones, as before; the mark and the codec are the file's."""
    import tomlkit

    bom, codec = _text_form(data)
    text = data[len(bom):].decode(codec)
    doc = tomlkit.parse(text)
    added, renamed = {}, {}
    for key, value in values.items():
        # The setting written with dashes (`image-mirror = ...`, as the commands spell it), which every command
        # refuses: the first such line takes the value and is renamed where it is, any other one is removed.
        dashed = dashed_spellings(key, doc)
        if value is None:
            doc.pop(key, None)
        elif key in doc:
            doc[key] = value
        elif dashed:
            old = dashed.pop(0)
            doc[old] = value
            renamed[old] = key
        else:
            added[key] = value
        for other in dashed:
            doc.pop(other)
    edited = tomlkit.dumps(doc)
    for old, new in renamed.items():
        edited = _with_key_renamed(edited, old, new)
    for key, value in added.items():
        edited = _with_key_added(edited, key, value)
    if "\r\n" in text and not _LONE_LF.search(text):
        edited = _LONE_LF.sub("\r\n", edited)
    return bom + edited.encode(codec)


def dashed_spellings(key: str, entries: Iterable[str]) -> list[str]:
    """The keys among `entries` that spell setting `key` with dashes (image-mirror, service-account), which the
    file's reading refuses ("did you mean image_mirror?")."""
    return [e for e in entries if e != key and e.replace("-", "_") == key]


def _with_key_renamed(text: str, old: str, new: str) -> str:
    """TOML `text` with its top-level key `old` renamed `new` on its own line, and nothing else changed (its value,
    its comment, its place). tomlkit has no public way to rename a key: the key is found as a line's first token
    (bare or quoted), and the first such line whose renaming reads back as the file with that one key renamed is
    used; where none does (the key written with an escape, "image\\u002dmirror"), the line is removed and `new` added as
    _with_key_added adds a key."""
    import tomllib

    import tomlkit

    data = tomllib.loads(text)
    wanted = {(new if k == old else k): v for k, v in data.items()}
    token = "|".join(re.escape(t) for t in (old, f'"{old}"', f"'{old}'"))
    for m in re.finditer(rf"^([ \t]*)(?:{token})([ \t]*=)", text, re.MULTILINE):
        edited = text[:m.start()] + m[1] + new + m[2] + text[m.end():]
        with contextlib.suppress(tomllib.TOMLDecodeError):
            if tomllib.loads(edited) == wanted:
                return edited
    doc = tomlkit.parse(text)
    doc.pop(old)
    return _with_key_added(tomlkit.dumps(doc), new, data[old])


def _with_key_added(text: str, key: str, value: str) -> str:
    """TOML `text` with the top-level line `key = "value"` added after its last setting, and nothing else changed.
    tomlkit puts a new key after whatever precedes the first [table] and, where no blank line was there, adds one
    before the table, which removing the key leaves behind: a file with a table of its own below its settings grew a
    blank line with each `config set` and `unset` of a key, and the new key went between the table and the comment
    over it (`# what I pay` above [prices]). Here it goes above the comment lines directly over the first table
    header (a comment at the very top of the file is the file's own heading, and stays first) and the blank lines
    before them. Where the file has no table, or the result would not read back as the file plus this key (a `#`
    line inside a multi-line string), tomlkit places it."""
    import tomllib

    import tomlkit

    line = tomlkit.dumps({key: value})
    at = _settings_end(text)
    if at is not None:
        edited = text[:at] + line + text[at:]
        with contextlib.suppress(tomllib.TOMLDecodeError):
            if tomllib.loads(edited) == {**tomllib.loads(text), key: value}:
                return edited
    doc = tomlkit.parse(text)
    doc[key] = value
    return tomlkit.dumps(doc)


def _settings_end(text: str) -> int | None:
    """Where a new top-level key goes in TOML `text` (_with_key_added says why there), or None when it has no
    table. The first table header is the first line starting with "[" that all the text before it reads as TOML:
    a "[" line inside a multi-line array or string leaves the text before it unfinished."""
    import tomllib

    lines = text.split("\n")  # (not splitlines, which also breaks at the form feeds and U+2028 a comment may hold)
    starts = [0]
    for each in lines:
        starts.append(starts[-1] + len(each) + 1)
    header = None
    for i, each in enumerate(lines):
        if each.lstrip().startswith("["):
            try:
                tomllib.loads(text[:starts[i]])
            except tomllib.TOMLDecodeError:
                continue
            header = i
            break
    if header is None:
        return None
    i = header
    while i > 0 and lines[i - 1].lstrip().startswith("#"):
        i -= 1
    if i == 0:  # the file's heading
        return starts[header]
    while i > 0 and not lines[i - 1].strip():
        i -= 1
    return starts[i]


def near_key(key: str) -> str | None:
    """The setting a key was most likely meant to be (`service-account`, `Region`, `regoin`, `location`), or None:
    for a key of the config file (such a key was ignored without a word, and the job went to the default region or
    ran as the default service account) and for `ftcli config set | get | unset KEY`. One rule for both: a typo
    (spelling.near says why it is counted in edits), or a setting's name with a word after it (`service_account_email`,
    `image_mirror_url`, `bucket_name`, `region_name`). The file's check took difflib's ratio at 0.8 and the commands'
    at 0.6, which also "meant" what is only the start of a name (`image`, which is rather --image, the trainer image,
    than image-mirror), and not `bucket_name`."""
    folded = key.strip().lower().replace("-", "_").replace(" ", "_")
    if folded in KEYS:
        return folded
    if folded in ALIASES:
        return ALIASES[folded]
    close = near(folded, KEYS, n=1) or [k for k in KEYS if folded.startswith(f"{k}_")]
    return close[0] if len(close) == 1 else None


def special_file(path: Path) -> str | None:
    """What `path` is where it is neither a regular file nor a folder (a named pipe, a device, a socket: _file_kind),
    else None; a missing path raises as stat does. Reading one can wait forever or never end: a price file that was a
    named pipe nothing writes into hung `ftcli jobs list`, and /dev/zero never ends. A pipe the shell hands over,
    `--search-file <(...)` or /dev/stdin (/dev/fd/N, /proc/PID/fd/N), is None: its writer is there."""
    import stat

    mode = path.stat().st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if str(path).startswith(("/dev/fd/", "/dev/std")) or os.path.realpath(path).startswith("/proc/"):
        return None
    return _file_kind(path)


def _file_kind(path: Path) -> str:
    import stat

    mode = path.stat().st_mode
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "something else"


def save_config_file(values: dict[str, str | None]) -> Path:
    """Set (or, with None, remove) these keys in the config file and keep everything else in it as it was: its
    comments, its order, keys and tables of its own, its line breaks and its encoding (_toml_edited)."""
    # The file is held to every command's reading without the entries this edit replaces or removes: a setting of
    # the wrong type (`region = true`, `region = ["x"]`: "region must be a string") refused `config unset region`
    # and `config set region X` alike, the two commands that mend it, and the line had to be edited by hand.
    return _edit_config_file(values, lambda: _settings_of(
        {k: v for k, v in config_entries().items() if k.replace("-", "_") not in values}, config_path()))


def remove_config_entry(key: str) -> tuple[Path, str] | None:
    """Remove the config file's top-level entry `key`, one that is no setting (a key, a table or an array of tables
    ftcli does not read, which every command warns of, or a misspelled setting, which every command refuses), and
    keep the rest of the file as save_config_file does. Returns (the file, the entry as _entry names it), or None
    when the file has no such entry. Only the file's own reading is checked first, not its other keys: removing one
    misspelled key must not be refused for another."""
    found: list[str] = []

    def check() -> None:
        entries = config_entries()
        if key in entries and key not in KEYS:
            found.append(_entry(key, entries[key]))

    path = _edit_config_file({key: None}, check)  # (without the entry, the edit leaves the file as it was)
    return (path, found[0]) if found else None


def _edit_config_file(values: dict[str, str | None], check: Callable[[], object]) -> Path:
    """save_config_file's edit, with `check` run on the file first, under the lock (it raises to refuse)."""
    path = config_path()
    # A config file that is a link (dotfiles kept in a repository) is edited where it points: the rename replaced
    # the link with a copy, and the file it pointed at no longer changed.
    real = Path(os.path.realpath(path))
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        blocker = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), e.filename)
        raise UsageError(f"cannot save the config file {path}: {blocker} is a file, not a folder",
                         hint="point FTCLI_CONFIG at a file in a folder (it need not exist yet)") from None
    except OSError as e:
        # A home that is missing or read-only (a container's user, HOME=/nonexistent): it said "cannot use
        # /nonexistent: No such file or directory", naming neither the config file nor the way round it.
        raise FtcliError(f"cannot save the config file {path}: {reason(e)}", hint=UNWRITABLE_CONFIG_HINT) from None
    # Read, edit and replace under a lock on the file's folder: two `ftcli config set` at once (a set-up script
    # running them in parallel) each read the file before the other wrote it, and the later rename dropped the
    # earlier one's key.
    with _folder_lock(real.parent):
        check()  # a file that is not there, not a file or not TOML is said as the commands say it
        try:
            _replace_file(real, _toml_edited(real.read_bytes() if real.exists() else b"", values))
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise  # (a full disk is said with its own fix)
            # A folder that is there but takes no new file (FTCLI_CONFIG in /etc, a read-only mount) said only
            # "cannot use PATH: Permission denied; check the permissions ...", where a missing or read-only home
            # (above) names the ways round it.
            raise FtcliError(f"cannot save the config file {path}: {e.strerror} ({real.parent} takes no new file)",
                             hint=UNWRITABLE_CONFIG_HINT) from None
    return path


UNWRITABLE_CONFIG_HINT = ("point FTCLI_CONFIG at a file in a writable folder, or set the setting's FTCLI_* variable "
                          "instead (FTCLI_PROJECT, FTCLI_REGION, FTCLI_BUCKET, FTCLI_SERVICE_ACCOUNT, "
                          "FTCLI_IMAGE_MIRROR)")


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive flock on `folder` itself (no lock file is left behind) while the block runs; where the platform
    or the file system has no flock, nothing is locked."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _replace_file(path: Path, data: bytes) -> None:
    """Written whole to a new temporary file of its own (never another file, nor through a link), then renamed over
    the old one: a full disk or a crash leaves the old config as it was, and no temporary file behind."""
    import tempfile

    tmp = None
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        tmp = Path(name)
        try:
            # The old file's mode (a new one keeps mkstemp's 0600). os.fchmod is "Availability: Unix." in the os
            # module's documentation up to Python 3.12; its versionchanged 3.13 note adds Windows (Doc/library/os.rst,
            # python/cpython, read 2026-11-27). Called there, every `ftcli config set` after the first was an
            # AttributeError traceback.
            if path.exists() and hasattr(os, "fchmod"):
                os.fchmod(fd, path.stat().st_mode & 0o7777)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        # Name the file the user knows, not ours: a write names no file, and a folder that takes no new file
        # (read-only, not the user's) named the temporary file mkstemp could not create
        # (`cannot use /etc/ftcli/.config.toml.k2x9.tmp: Permission denied`).
        e.filename, e.filename2 = str(path), None
        raise


# What gcloud takes as a configuration's name: the name an active_config file may hold, and the one a
# configurations/config_NAME file carries (named_configs._VALID_CONFIG_NAME_REGEX and _CONFIG_FILE_REGEX, in the
# source _no_such_configuration cites, read 2026-11-29). Written once: it was two copies of one rule.
GCLOUD_CONFIG_NAME = r"[a-z][-a-z0-9]*"


def _gcloud_values() -> dict[str, tuple[str, str, str]]:
    """Project and region as gcloud itself would take them, each as (value, source, origin) (running `gcloud` costs
    a second or more, and it may not be installed). The source is "gcloud" for gcloud's configuration and its
    CLOUDSDK_* variables, "adc" for what only Google's client libraries read (GOOGLE_CLOUD_PROJECT, a key file's
    project_id: `Value`'s docstring).

    gcloud's active configuration is the one CLOUDSDK_ACTIVE_CONFIG_NAME names, else the one in `active_config`
    ("You can activate a configuration for a single gcloud invocation using flag, `--configuration my-config`, or
    environment variable `CLOUDSDK_ACTIVE_CONFIG_NAME=my-config`", the help text of `gcloud topic configurations`,
    read 2026-11-27), and a property's
    CLOUDSDK_SECTION_PROPERTY variable wins over the configuration's value ("The environment variable values take
    precedence over property values set using gcloud config set", "Managing gcloud CLI properties",
    https://cloud.google.com/sdk/docs/properties, read 2026-11-27). Google's client libraries take
    GOOGLE_CLOUD_PROJECT (or the older GCLOUD_PROJECT) over gcloud's project (google-auth 2.63.0,
    `google.auth.default`). Read otherwise, a job went to the project of a configuration gcloud was not using.
    """
    root = gcloud_config_dir()
    active = os.environ.get("CLOUDSDK_ACTIVE_CONFIG_NAME", "").strip()
    named_by = "CLOUDSDK_ACTIVE_CONFIG_NAME" if active else None
    if not active:
        try:
            active = (root / "active_config").read_text().strip()
        except OSError:
            active = ""
        if active != "NONE" and not re.fullmatch(GCLOUD_CONFIG_NAME, active):
            # A name gcloud never writes (`Prod`, `my config`): gcloud deletes the file and reads its default
            # configuration (named_configs._ActiveConfigNameFromFile, "Somehow the file got corrupt, just remove it";
            # the same source as _no_such_configuration's, read 2026-11-29). ftcli read config_Prod, which a
            # case-insensitive disk (macOS) opens as config_prod: another project than gcloud's.
            active = ""
        named_by = str(root / "active_config") if active else None
    active = active or "default"
    path = root / "configurations" / f"config_{active}"
    if named_by and active != "NONE" and not path.is_file():
        _no_such_configuration(active, path, named_by)
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except configparser.Error:
        parser = configparser.ConfigParser()  # a file gcloud could not read either; its variables still count

    def prop(section: str, name: str) -> tuple[str, str] | None:
        var = f"CLOUDSDK_{section.upper()}_{name.upper()}"
        if os.environ.get(var):
            return os.environ[var], var
        if parser.has_option(section, name) and parser.get(section, name).strip():
            return parser.get(section, name).strip(), f"gcloud configuration {active} ({section}/{name})"
        return None

    def gcloud(found: tuple[str, str] | None) -> tuple[str, str, str] | None:
        return None if found is None else (found[0], "gcloud", found[1])

    def adc(found: tuple[str, str] | None) -> tuple[str, str, str] | None:
        return None if found is None else (found[0], "adc", found[1])

    out = {}
    explicit = next(((os.environ[v], v) for v in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT") if os.environ.get(v)),
                    None)
    if project := adc(explicit) or gcloud(prop("core", "project")) or adc(_key_file_project()):
        out["project"] = project
    if region := gcloud(prop("ai", "region") or prop("compute", "region")):
        out["region"] = region
    if impersonate := gcloud(prop("auth", "impersonate_service_account")):
        out["impersonate_service_account"] = impersonate  # not a setting: gcloud_impersonation says why it is read
    return out


def _no_such_configuration(name: str, path: Path, named_by: str) -> None:
    """Say that CLOUDSDK_ACTIVE_CONFIG_NAME, or gcloud's own active_config file, names a configuration with no file
    (a typo: `prdo`; a configuration file deleted by hand, which `gcloud config configurations delete` refuses for the
    active one), which is then read as empty, as gcloud reads it: its named_configs takes the variable's name as it
    is, and the file's when it is a valid name (`_EffectiveActiveConfigName`, `_ActiveConfigNameFromFile`: neither
    checks that the configuration exists), and its PropertiesFile reads the file with ConfigParser.read, which skips a
    file that is not there (google-cloud-sdk, lib/googlecloudsdk/core/configurations/named_configs.py and
    properties_file.py, github.com/google-cloud-sdk-unofficial/google-cloud-sdk at 797f815, read 2026-11-29). NONE,
    gcloud's reserved configuration of no properties, has no file either and is not said. gcloud then has no project
    and its commands stop on that; ftcli (like Google's client libraries) went on to a key file's project_id, and a
    job went to a project nobody chose, without a word. `named_by` is the variable's name or the file's path."""
    try:
        names = sorted(m.group(1) for f in path.parent.iterdir()
                       if (m := re.fullmatch(f"config_({GCLOUD_CONFIG_NAME})", f.name)))
    except OSError:  # no configurations folder (gcloud never set up), or one this user may not list
        names = []
    here = ", ".join(names) or "none"
    # The variable is the user's to change; the file is gcloud's, which `activate` rewrites.
    fix = ("set CLOUDSDK_ACTIVE_CONFIG_NAME to one of them, or unset it" if named_by == "CLOUDSDK_ACTIVE_CONFIG_NAME"
           else "`gcloud config configurations activate NAME` makes one of them the active one")
    _log.warning(f"{named_by} names the gcloud configuration {name!r}, which does not exist ({path}): gcloud reads it "
                 "as empty, and so does ftcli",
                 extra={"hint": f"`gcloud config configurations list` names yours (here: {here}); {fix}"})


def _key_file_project() -> tuple[str, str] | None:
    """The project_id of the service-account key Application Default Credentials use, and where it was read, or None.
    google.auth.default returns it as the project: "If the environment variable GOOGLE_APPLICATION_CREDENTIALS is set
    to the path of a valid service account JSON private key file [...] The project ID returned is the project ID
    defined in the service account file if available" (google-auth's reference, `google.auth.default`,
    https://googleapis.dev/python/google-auth/latest/reference/google.auth.html, read 2026-11-27); google-auth 2.63.0
    reads gcloud's own ADC file (application_default_credentials.json) the same way when the variable is unset. A
    user's `gcloud auth application-default login` file (type authorized_user) gives no project: its
    quota_project_id only bills API quota to a project. Read only when nothing above names a project (gcloud's
    configuration is what the user chose for their commands; a key's project is where its account lives): CI given
    only a key had "no Google Cloud project". A file that cannot be read is left to the credentials check."""
    var = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
    path = Path(var) if var else gcloud_config_dir() / "application_default_credentials.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    project = info.get("project_id") if isinstance(info, dict) and info.get("type") == "service_account" else None
    if not isinstance(project, str) or not project.strip():
        return None
    return project.strip(), f"project_id of {path}" + (" (GOOGLE_APPLICATION_CREDENTIALS)" if var else "")


def gcloud_config_dir() -> Path:
    """gcloud's own configuration folder: "Configurations are stored in your user config directory (typically
    ~/.config/gcloud on MacOS and Linux, or %APPDATA%\\gcloud on Windows) [...] The config directory can be changed by
    setting the environment variable CLOUDSDK_CONFIG" ("Managing gcloud CLI configurations",
    https://cloud.google.com/sdk/docs/configurations, read 2026-11-27); without APPDATA, google-auth 2.63.0's
    `_cloud_sdk.get_config_path` takes %SystemDrive%\\gcloud. Read from ~/.config/gcloud on Windows, gcloud's project
    and region were never found there."""
    if os.environ.get("CLOUDSDK_CONFIG"):
        return Path(os.environ["CLOUDSDK_CONFIG"])
    if ON_WINDOWS:
        if os.environ.get("APPDATA"):
            return Path(os.environ["APPDATA"], "gcloud")
        return Path(os.environ.get("SystemDrive", "C:") + "\\", "gcloud")
    return Path.home() / ".config" / "gcloud"


def gcloud_impersonation() -> tuple[str, str] | None:
    """The service account gcloud impersonates (auth/impersonate_service_account, or its CLOUDSDK_ variable) and
    where that was read, or None. Application Default Credentials, which ftcli uses, do not follow it: "Your local ADC
    file is associated with your user account, not your gcloud CLI configuration. Changing to a different gcloud CLI
    configuration might change the identity used by the gcloud CLI, but it does not affect your local ADC file or the
    ADC configuration" ("Set up ADC for a local development environment",
    https://cloud.google.com/docs/authentication/external/set-up-adc-local, read 2026-11-27)."""
    found = _gcloud_values().get("impersonate_service_account")
    return None if found is None else (found[0], found[2])


@dataclass(frozen=True)
class Value:
    """One setting's effective value and where it came from: source is flag, env (an FTCLI_* variable), file,
    gcloud (its configuration or a CLOUDSDK_* variable), adc (what only Google's client libraries read for
    Application Default Credentials: GOOGLE_CLOUD_PROJECT or GCLOUD_PROJECT, or the project_id of a service-account
    key file) or default (None when unset); origin names it (--project, FTCLI_PROJECT, the config file, gcloud's
    property, the variable, `project_id of KEY_FILE`)."""

    key: str
    value: str | None
    source: str | None = None
    origin: str | None = None

    @property
    def where(self) -> str:
        """How to name this value in a message: the flag, the variable, the file or gcloud's property."""
        if self.source == "file":
            return f"{self.key.replace('_', '-')} in {self.origin}"
        if self.source == "gcloud":
            return f"{self.key} from {self.origin}"
        return self.origin or f"--{self.key.replace('_', '-')}"


def effective(*, project: str | None = None, region: str | None = None, bucket: str | None = None,
              service_account: str | None = None) -> dict[str, Value]:
    """Each setting from the first layer that has it: flags > FTCLI_* environment > config file > gcloud > default.
    Nothing is checked here (see `resolve`). image_mirror has no flag (--image names one image)."""
    flags = {"project": project, "region": region, "bucket": bucket, "service_account": service_account,
             "image_mirror": None}
    config = load_config_file()
    gcloud = _gcloud_values()
    out: dict[str, Value] = {}
    for key in KEYS:
        flag = f"--{key.replace('_', '-')}"
        var = f"FTCLI_{key.upper()}"
        from_gcloud, gcloud_source, gcloud_origin = gcloud.get(key, (None, None, None))
        candidates = [
            (flags[key], "flag", flag),
            (os.environ.get(var), "env", var),
            (config.get(key), "file", str(config_path())),
            (from_gcloud, gcloud_source, gcloud_origin),
            (DEFAULT_REGION if key == "region" else None, "default", "ftcli's default"),
        ]
        # A flag given empty (`--project "$PROJECT"` with the variable unset) is kept, and refused as a bad value:
        # passed over, it let the job go to the next layer's project without a word. An empty variable is unset.
        value, source, origin = next(((v, s, o) for v, s, o in candidates if v or (s == "flag" and v is not None)),
                                     (None, None, None))
        out[key] = Value(key, value, source, origin)
    staging, where = out["bucket"], out["region"]
    if staging.value and REGION_FIELD in staging.value and where.value:
        # gs://NAME-{region}: one staging bucket per region (Vertex wants it in the job's region)
        out["bucket"] = replace(staging, value=staging.value.replace(REGION_FIELD, where.value))
    return out


def problems_of(values: dict[str, Value], need_bucket: bool = True) -> list[str]:
    """What is wrong with the effective settings, each naming where the value came from."""
    problems = []
    project, region, bucket, sa, mirror = (values[k] for k in KEYS)
    if project.value is None:
        problems.append("no Google Cloud project: pass --project ID, set FTCLI_PROJECT, or run "
                        "`ftcli config set project ID`")
    elif (p := check_project(project.value, project.where)) is not None:
        problems.append(p)
    if (p := check_region(region.value or "", region.where)) is not None:
        problems.append(p)
    if bucket.value is None:
        if need_bucket:
            problems.append("no staging bucket: pass --bucket gs://BUCKET[/PREFIX], set FTCLI_BUCKET, or run "
                            "`ftcli config set bucket gs://BUCKET`")
    elif (p := check_bucket(bucket.value, bucket.where)) is not None:
        problems.append(p)
    if sa.value is not None and (p := check_service_account(sa.value, sa.where)) is not None:
        problems.append(p)
    if mirror.value is not None and (p := check_image_mirror(mirror.value, mirror.where)) is not None:
        problems.append(p)
    return problems


@dataclass(frozen=True)
class Settings:
    project: str
    region: str
    bucket: str  # gs://bucket[/prefix], no trailing slash
    service_account: str | None = None
    image_mirror: str | None = None  # LOCATION-docker.pkg.dev/PROJECT/REPOSITORY: a remote repository of Docker Hub

    @property
    def bucket_name(self) -> str:
        return split_gcs(self.bucket)[0]

    @property
    def prefix(self) -> str:
        return split_gcs(self.bucket)[1]

    def gcs_path(self, *parts: str) -> str:
        return "/".join([self.bucket, "ftcli", *parts])


def check_project(value: str, where: str = "--project") -> str | None:
    if not PROJECT_RE.match(value):
        return f"{where}: {value!r} is not a valid project id: {project_id_problem(value)}"
    return None


def project_id_problem(value: str) -> str:
    """Which of PROJECT_RE's rules (Resource Manager's, see its comment) `value` breaks, with the fix. It said only
    "(6-30 lowercase letters, digits, '-')", which `my-project-` and `1st-project` fit: the rule they break (no
    trailing hyphen, a letter first) went unsaid. A project's name (`My Project`) is not its id."""
    _, _, bare = value.rpartition(":")  # a domain-scoped id's part after "example.com:"
    ids = "(`gcloud projects list` shows your projects' ids)"
    if not bare:
        return f"it is empty {ids}"
    if bare != bare.lower():
        return f"project ids have no capital letters; a project's name is not its id {ids}"
    if not re.fullmatch(r"[a-z0-9-]*", bare):
        return f"project ids have only lowercase letters, digits and '-' {ids}"
    if not 6 <= len(bare) <= 30:
        return f"it has {len(bare)} characters; project ids have 6 to 30"
    if not bare[0].isalpha():
        return f"project ids start with a letter {ids}"
    if bare.endswith("-"):
        return "project ids do not end with '-'"
    return "a domain-scoped project id is DOMAIN:ID, its domain in lowercase (example.com:my-project)"


def check_service_account(value: str, where: str = "--service-account") -> str | None:
    if not SA_RE.match(value):
        return f"{where} must be a service account e-mail (NAME@PROJECT.iam.gserviceaccount.com), got {value!r}"
    # E-mail addresses are compared without case; IAM's names are lowercase.
    name, _, domain = value.lower().partition("@")
    if domain.endswith(".iam.gserviceaccount.com") and not domain.startswith("gcp-sa-"):
        project = domain.removesuffix(".iam.gserviceaccount.com")
        if not SA_ID_RE.match(name):
            return (f"{where}: {value!r} is no service account IAM creates: the name before '@' must be 6-30 lowercase "
                    "letters, digits and dashes, starting with a letter and not ending with a dash (`gcloud iam "
                    "service-accounts list` shows yours)")
        if "." not in project and not PROJECT_ID_RE.match(project):
            return (f"{where}: {value!r} names no project: between '@' and '.iam' comes a project id (6-30 lowercase "
                    "letters, digits and dashes, starting with a letter)")
    elif domain == "developer.gserviceaccount.com" and not re.fullmatch(r"\d+-[a-z0-9]+", name):
        return (f"{where}: {value!r} is no Compute Engine default service account: it is "
                "PROJECT_NUMBER-compute@developer.gserviceaccount.com (the project's number, not its id)")
    elif domain == "appspot.gserviceaccount.com" and ":" not in name and "." not in name \
            and not PROJECT_ID_RE.match(name):
        return (f"{where}: {value!r} is no App Engine default service account: it is "
                "PROJECT_ID@appspot.gserviceaccount.com, with the project's id")
    return None


# An Artifact Registry Docker repository's address: LOCATION-docker.pkg.dev/PROJECT/REPOSITORY (images.py has where
# that is read). Only its shape is checked; the repository's existence and mode are Artifact Registry's to say.
IMAGE_MIRROR_RE = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]-docker\.pkg\.dev/[a-z0-9.:-]+/[a-z0-9._-]+/?$")


def check_image_mirror(value: str, where: str = "image-mirror") -> str | None:
    if not IMAGE_MIRROR_RE.match(value):
        return (f"{where} must be an Artifact Registry remote repository of Docker Hub, "
                f"LOCATION-docker.pkg.dev/PROJECT/REPOSITORY (no image name), got {value!r}")
    return None


# Cloud Storage's "Object naming requirements" (https://cloud.google.com/storage/docs/naming-objects, read 2026-11-29 in
# its stored ?hl=JA copy, the one the search tool holds): a name is 1 to 1,024 bytes of UTF-8
# ("UTF-8 エンコード時の長さが 1~1,024 バイト"), holds no carriage return or line feed, and cannot start with
# .well-known/acme-challenge/ ("先頭を .well-known/acme-challenge/ にすることはできません").
MAX_OBJECT_NAME_BYTES = 1024
ACME_CHALLENGE = ".well-known/acme-challenge/"


def object_name_length_problem(uri: str) -> str | None:
    """Why the object a gs://BUCKET/NAME URI names is too long for Cloud Storage (see MAX_OBJECT_NAME_BYTES), or
    None."""
    size = len(uri[len("gs://"):].partition("/")[2].encode("utf-8"))
    if size <= MAX_OBJECT_NAME_BYTES:
        return None
    return f"its object name in the bucket has {size} bytes, and Cloud Storage takes at most {MAX_OBJECT_NAME_BYTES}"


def check_bucket(value: str, where: str = "--bucket", staging: bool = True) -> str | None:
    """What is wrong with a gs://BUCKET[/PREFIX] value, or None; `staging`: it is the staging bucket, whose prefix
    the job also reads through /gcs/."""
    if not value.startswith("gs://"):
        # `my-bucket`, `gs:/my-bucket`, `gcs://my-bucket/runs` (how gcsfs and some tools write it): the URI it
        # most likely meant, written out; never for a local path (`/tmp/out`, `./runs`), nor another scheme (s3://).
        meant = re.sub(r"^(?:gcs:/+|gs:/*)", "", value.strip())
        fix = (f": write gs://{meant}" if meant and not meant.startswith((".", "/", "~")) and "://" not in meant
               and bucket_name_problem(meant.partition("/")[0]) is None else "")
        return f"{where} must be a gs:// URI (gs://BUCKET[/PREFIX]), got {value!r}{fix}"
    name, _, prefix = value[len("gs://"):].partition("/")
    problem = bucket_name_problem(name)
    if problem:
        return f"{where}: bucket name {name!r} {problem}"
    if not staging:
        return None
    # The job installs the trainer from the bucket's Cloud Storage FUSE mount (/gcs/BUCKET/PREFIX/...): gcsfuse
    # does not support object names with '//' ("Unsupported object names",
    # https://github.com/GoogleCloudPlatform/gcsfuse/blob/master/docs/semantics.md, read 2026-11-27), and the
    # kernel resolves a '.' or '..' segment of the /gcs/ path itself, so it would name other objects than the ones
    # uploaded: the job would fail at its first step.
    prefix = prefix.rstrip("/")  # a trailing slash is dropped (resolve)
    if (p := object_name_problem(prefix)) is not None:
        return f"{where}: the prefix {prefix!r} {p}"
    if f"{prefix}/".startswith(ACME_CHALLENGE):
        # Every object ftcli writes is named PREFIX/ftcli/...: under this prefix Cloud Storage refused the first upload
        # (the trainer package) with a 400 that ftcli printed as a raw HTTP error.
        return (f"{where}: the prefix {prefix!r} puts every object under {ACME_CHALLENGE}, where Cloud Storage takes "
                "no object names: pick another prefix")
    parts = prefix.split("/") if prefix else []
    if any(part in ("", ".", "..") for part in parts):
        clean = "/".join(part for part in parts if part not in ("", ".", ".."))
        return (f"{where}: the prefix {prefix!r} has an empty, '.' or '..' part, which the job cannot reach through "
                f"its /gcs/ mount: write gs://{name}" + (f"/{clean}" if clean else ""))
    return None


def object_name_problem(name: str) -> str | None:
    """What Cloud Storage refuses in an object name that ftcli would write (its prefix, a file's name), or None.
    Object names may not contain a carriage return or a line feed ("Object naming requirements",
    https://cloud.google.com/storage/docs/naming-objects?hl=JA, read 2026-11-27 in its Japanese rendering:
    "オブジェクト名に、改行やラインフィード文字を含めることはできません"). The pre-flight let them through, so the
    upload would be refused after the trainer wheel had gone up."""
    if "\r" in name or "\n" in name:
        return "has a line break, which Cloud Storage object names cannot hold"
    try:
        # Object names are Unicode, "UTF-8 エンコード時の長さが 1~1,024 バイト" (the same page, read 2026-11-29): a file
        # named in Latin-1 (its bytes kept by Python as lone surrogates) has no such name.
        name.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(name)  # (the name's own bytes, as the file system holds them)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"is not UTF-8 (byte 0x{raw[e.start]:02x}), which Cloud Storage object names are"
        return "is not UTF-8, which Cloud Storage object names are"
    return None


def object_name_of(name: str) -> str:
    """A local file's name as ftcli names its object (a data file's name is kept only for its extension and the
    logs): a line break as '_' and a byte that is not UTF-8 as U+FFFD, neither of which an object name can hold
    (object_name_problem)."""
    name = re.sub(r"[\r\n]", "_", name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        name = os.fsencode(name).decode("utf-8", "replace")
    return name


def bucket_name_problem(name: str) -> str | None:
    """What Cloud Storage's naming rules (BUCKET_NAME_RE's comment) say is wrong with `name`, with the fix; None if
    nothing."""
    if len(name) < 3:
        return "is too short: bucket names have 3 to 63 characters"
    if not re.fullmatch(r"[a-z0-9._-]+", name):
        return "may contain only lowercase letters, digits, '-', '_' and '.'"
    if not BUCKET_NAME_RE.match(name):
        return "must start and end with a letter or digit"
    if "." not in name and len(name) > 63:
        return f"has {len(name)} characters; at most 63 (up to 222 only for names with dots)"
    if len(name) > 222:
        return f"has {len(name)} characters; at most 222 even with dots"
    if "." in name:
        parts = name.split(".")
        if "" in parts:
            return "has an empty part between dots ('..')"
        long = next((p for p in parts if len(p) > 63), None)
        if long is not None:
            return f"has a dot-separated part of {len(long)} characters; each part is at most 63"
        if _IP_ADDRESS.match(name):
            return "looks like an IP address, which Cloud Storage refuses"
    if name.startswith("goog"):
        return "begins with 'goog', which Cloud Storage reserves: pick another prefix"
    if _GOOGLE_LIKE.search(name):
        return "contains 'google' (or a look-alike), which Cloud Storage refuses: pick another name"
    return None


def check_region(value: str, where: str = "--region") -> str | None:
    from ftcli.regions import VERTEX_REGIONS

    if value in VERTEX_REGIONS:
        return None
    if "," in value.strip(", "):
        # FTCLI_REGION=us-central1,europe-west4 (as `ftcli train --region` takes it) was "unknown Vertex AI region
        # ...; did you mean europe-west4?", as if the first region were a typo to drop.
        return (f"{where}: {value!r} names several regions, where one is taken (a list of regions to fall back on "
                "is given to `ftcli train --region`)")
    # `US-CENTRAL1`, `europe-west-4`, `us-centrl1`; never a region that is merely built of the same parts
    # (`mars-north1` was "did you mean asia-northeast1?": spelling.near says why)
    close = near(value, sorted(VERTEX_REGIONS))
    hint = f"did you mean {and_list(close, 'or')}?" if close else "e.g. us-central1, europe-west4, asia-southeast1"
    return f"{where}: unknown Vertex AI region {value!r}; {hint}"


def resolve(*, project: str | None = None, region: str | None = None, bucket: str | None = None,
            service_account: str | None = None, need_bucket: bool = True) -> Settings:
    """Resolve and check every setting; raise one UsageError that lists every problem, each naming the flag,
    variable, file or gcloud property its value came from. Without `need_bucket` the command reads jobs only
    (project and region): a bad bucket or service account, which it never uses, does not stop it."""
    values = effective(project=project, region=region, bucket=bucket, service_account=service_account)
    checked = values if need_bucket else {**values, "bucket": Value("bucket", None),
                                          "service_account": Value("service_account", None),
                                          "image_mirror": Value("image_mirror", None)}
    problems = problems_of(checked, need_bucket)
    if problems:
        raise_problems(problems, "settings")
    project_id, region_name = values["project"].value, values["region"].value
    assert project_id is not None and region_name is not None  # problems_of refuses either missing
    return Settings(project=project_id, region=region_name,
                    bucket=(values["bucket"].value or "").rstrip("/"), service_account=values["service_account"].value,
                    image_mirror=(values["image_mirror"].value or "").rstrip("/") or None)


def raise_problems(problems: list[str], what: str, hints: list[str] | None = None) -> None:
    """One error for every problem of the `what` (its line alone when there is one), with the `hints` of the errors
    they came from (`errors.gather`): one problem keeps its own; of several, each hint is said once, after the list,
    in the order of the problems, as a problem that brought none reads as before."""
    hint = "; ".join(dict.fromkeys(hints or ())) or None
    if len(problems) == 1:
        raise UsageError(problems[0], hint=hint)
    raise UsageError(f"{len(problems)} problems with the {what}:", hint=hint, problems=problems)
