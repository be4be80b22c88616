"""`ftcli download JOB [DIR]`, `ftcli predict MODEL_DIR_OR_JOB [TEXT]...` and `ftcli evaluate MODEL_DIR_OR_JOB FILE`:
parse, call `ftcli.models`, render."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, Optional

import typer

from ftcli.cli.options import JOB_FORMS, JobArg, JsonOpt, ProjectOpt, RegionOpt, TrialOpt
from ftcli.errors import UsageError

if TYPE_CHECKING:
    from ftcli.models import Downloaded
    from ftcli.values import JobName

# predict's and evaluate's own (the file is predict's --file, evaluate's FILE)
ModelArg = Annotated[str, typer.Argument(
    metavar="MODEL_DIR_OR_JOB", help=f"A model folder, or a job: {JOB_FORMS}.")]
TextColumnOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--text-column", metavar="NAME", help="The column of a .csv, .tsv or .jsonl file that holds the text [default: the "
    "one the model was trained on].")]
TextPairColumnOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--text-pair-column", metavar="NAME", help="A model trained on sentence pairs: the column of a .csv, .tsv or "
    ".jsonl file that holds each row's second text [default: the one the model was trained on].")]
ThresholdOpt = Annotated[Optional[float], typer.Option(  # noqa: UP045
    "--threshold", metavar="P",
    help="Multi-label: a label is predicted at or above this probability [default: the model's].")]


def _check_options(threshold: float | None, text_column: str | None, text_pair_column: str | None,
                   *others: tuple[str, str | None]) -> None:
    """What predict and evaluate refuse before reading anything: a --threshold that is no probability, a column
    option given empty (`others`: more (flag, value)), and one column named for both texts of a pair."""
    if threshold is not None and not 0 < threshold <= 1:  # a probability, as the trainer's --threshold
        raise UsageError(f"--threshold is a probability in (0, 1], got {threshold}")
    for flag, column in (("--text-column", text_column), ("--text-pair-column", text_pair_column), *others):
        if column is not None and not column.strip():
            raise UsageError(f"{flag} is empty", hint="give the name of one of the file's columns")
    if text_column is not None and text_column == text_pair_column:
        raise UsageError(f"--text-pair-column {text_pair_column!r} is the --text-column too: a pair needs two "
                         "columns", hint="name the column that holds each row's second text")


def _interrupted(said: str, stopped: list[int]) -> NoReturn:
    """End a command cut short by Ctrl-C, or by the SIGTERM or SIGHUP that stop_signals_interrupt made one (`stopped`
    holds its number): one line saying what is left, and 130 (Ctrl-C) or 128 + the signal's number, as a shell
    reports a signal. (typer turns a bare Ctrl-C into exit 130 without a word: the app's "interrupted" alone.) Said
    within output.last_words' patience: a reader that no longer reads (`ftcli predict M --file big.txt | reader`, a
    stopped pager) kept ftcli from exiting, Python's flush at exit waiting on the lines the signal had cut short."""
    from ftcli.output import say_last

    say_last(f"\ninterrupted; {said}")
    raise typer.Exit(128 + stopped[0] if stopped else 130) from None


# (ftcli's model cache: a copy without its completion marker is never used, the next predict or evaluate of the job
# downloads it anew)
CACHED_AGAIN = "; the same command again downloads the model anew"


def download(
    job: JobArg,
    dest: Annotated[Optional[Path], typer.Argument(  # noqa: UP045
        metavar="DIR", help="Folder for the model, new or empty [default: ./ftcli-models/JOB_ID].")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Write the model's files into a non-empty folder: files with the model's names are "
        "replaced, every other file is kept.")] = False,
    trial: TrialOpt = None,
    json_out: JsonOpt = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Copy a job's exported model (its AIP_MODEL_DIR) to a local folder; for a tuning job, the best trial's
    (or --trial's).

    Refuses a model whose completion marker is missing (still running, failed half-way, or exported by an
    older trainer), and a folder that already holds other files (unless --force); a folder that holds this very
    model is left as it is. Nothing is ever deleted.

    Example: ftcli download last ./my-model
    """
    from ftcli import jobs, models
    from ftcli.cli.watch import stop_signals_interrupt
    from ftcli.output import note, transfer

    name = jobs.resolve_job(job, project, region, trial=trial, notify=note)
    # SIGTERM or SIGHUP (a CI step's timeout, `docker stop`, a closed terminal) as Ctrl-C: they killed ftcli without a
    # word, its staging folder left for the next download to clean; and while the result was printed (behind a reader
    # that stopped reading), the model whole in its folder, the app's bare "interrupted" left that unsaid
    with stop_signals_interrupt() as stopped:
        try:
            with transfer("downloading the model") as progress:
                got = models.download_model(name, dest, force=force, shown=f"{job} --trial {trial}" if trial else job,
                                            notify=note, progress=progress)
        except models.DownloadInterrupted as e:
            again = shlex.join(["ftcli", "download", job, str(dest or models.default_destination(name)), "--force",
                                *(["--trial", trial] if trial else [])])
            _interrupted(e.said + (f"; finish it with {again}" if e.partial else ""), stopped)
        try:
            _show_download(got, name, json_out)
        except KeyboardInterrupt:
            _interrupted(f"the model is downloaded, whole, in {got.path}", stopped)


def _show_download(got: Downloaded, name: JobName, json_out: bool) -> None:
    """download's result: the folder and its files (or --json's object), then the command that uses it."""
    from ftcli import jobs, models
    from ftcli.output import escape, note, show_one

    shown = jobs.label(name, jobs.short_id(name))
    result = {"path": str(got.path), "job": name.full, "id": name.id, "files": got.files, "bytes": got.bytes,
              "already_there": got.already}
    files = (lambda r: f"{r['files']}, already there: the same files as job {shown} " +
             ("(nothing downloaded)" if not r["bytes"] else "(put there by another download meanwhile)")) \
        if got.already else (lambda r: f"{r['files']} ({r['bytes']:,} bytes) from job {shown}")
    show_one(result, (("files", files),), json_out=json_out, title=f"model: {escape(str(got.path))}")
    if not json_out:
        pairs = models.trained_on_pairs(got.path)
        where = str(got.path) if not str(got.path).startswith("-") else f"./{got.path}"  # not read as an option
        note(f'next: ftcli predict {shlex.quote(where)} "text"' + (f' --pair "{pairs[1]}"' if pairs else ""))


def _load_texts(texts: list[str], file: Path | None) -> tuple[list, list, str | None]:
    """(the TEXT arguments, --file's texts, --file's whole text where it was read line by line), read before the
    model is downloaded: bad input is said first."""
    from ftcli.models import Text, read_inputs

    given = [Text(t, f"text {i}") for i, t in enumerate(texts, 1)]
    from_file, text = read_inputs(file) if file is not None else ([], None)
    if not given and not from_file:
        raise UsageError("no text to classify", hint='pass texts as arguments or --file texts.txt (one per line)')
    return given, from_file, text


def predict(
    model: ModelArg,
    texts: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
        metavar="TEXT", help="Texts to classify.")] = None,
    file: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--file", metavar="FILE",
        help="Also classify every non-empty line of this file (a model trained on sentence pairs: "
        "TEXT<TAB>PAIR lines), or every row of a .csv or .jsonl file, or of a .tsv file whose first line names "
        "its columns (the text in the column the model was trained on, or --text-column's); UTF-8, optionally "
        ".gz.")] = None,
    text_column: TextColumnOpt = None,
    text_pair_column: TextPairColumnOpt = None,
    pair: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--pair", metavar="TEXT",
        help="A model trained on sentence pairs (MNLI, MRPC, STS-B, ...): the second text of each TEXT, "
        "once per TEXT, in order.")] = None,
    threshold: ThresholdOpt = None,
    trial: TrialOpt = None,
    json_out: JsonOpt = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Classify texts with an exported model: label and score per text (multi-label: every label at or above
    the threshold, or "(none)"; regression: the predicted score).

    Examples:

      ftcli predict ftcli-runs/20261125-120000-ab12/model "a wonderful, moving film"

      ftcli predict last --file reviews.txt --json

      ftcli predict last --file tweets.csv --text-column tweet

      ftcli predict mnli-model "A man plays a guitar." --pair "Someone makes music."
    """
    from ftcli import models
    from ftcli.cli.watch import stop_signals_interrupt
    from ftcli.output import json_line, note, transfer

    if pair and file is not None:
        raise UsageError("--pair pairs the TEXT arguments, not the lines of --file",
                         hint="in --file, put each pair on one line: TEXT<TAB>PAIR")
    for flag, column in (("--text-column", text_column), ("--text-pair-column", text_pair_column)):
        if column is not None and (file is None or not (models.is_table(file) or models.is_tsv(file))):
            raise UsageError(f"{flag} names a column of a .csv, .tsv or .jsonl --file" +
                             (f"; {file} is read line by line" if file is not None else ""),
                             hint=f"give --file ROWS.csv (or .jsonl), or drop {flag}")
    _check_options(threshold, text_column, text_pair_column)
    printed, items = 0, []
    # What was under way before the first chunk was scored, for an interruption there ("no text was classified"
    # alone did not say whether it was still reading the file or loading the model: minutes, for a big one)
    phase = f"reading --file {file}" if file is not None else "getting the model"
    # SIGTERM or SIGHUP (a CI step's timeout, `docker stop`, a closed terminal) as Ctrl-C, in every phase: they killed
    # ftcli without a word (the model's staging left in the cache for the next predict to clean), and Ctrl-C said
    # only "interrupted", nothing of the cache nor of how many of the texts the printed lines are
    with stop_signals_interrupt() as stopped:
        try:
            arguments, from_file, file_text = _load_texts(texts or [], file)
            phase = "getting the model"
            with transfer("downloading the model") as progress:
                path = models.model_folder(model, project, region, notify=note, progress=progress, trial=trial)
            if file is not None and models.is_tsv(file):  # by its columns or its lines: the model's text column says
                assert file_text is not None  # (a .tsv is read line by line first: its rows are read from its text)
                from_file = models.tsv_inputs(path, file, from_file, file_text, text_column, text_pair_column)
            items = arguments + from_file
            phase = "loading the model"
            chunks = models.predict_chunks(path, items, threshold, pairs=pair or None, text_column=text_column,
                                           text_pair_column=text_pair_column, notify=note)
            phase = ""  # scoring the first chunk
            # Each chunk is printed as it is scored: a 100,000-line --file printed nothing for hours, then everything
            # (with --json too: its JSON Lines were all held, in memory, until the last line was scored). Counted
            # line by line, so that an interruption says how many of the texts the lines printed are: each line as it
            # is handed to stdout, not after. A signal that lands in the write (a slow terminal, a pipe whose reader
            # lags) stops it once the line is handed over, and the line goes out (the exit flushes stdout); counted
            # after the write, it was printed but left out of "the first N".
            for chunk in chunks:
                for r in chunk:
                    line = json_line(r) if json_out else _predicted(r)
                    printed += 1
                    print(line, flush=json_out)  # (--json: flushed line by line, as emit_json does)
                sys.stdout.flush()  # out now, not when a pipe's or a file's buffer fills
        except models.DownloadInterrupted as e:
            _interrupted(e.said + (CACHED_AGAIN if e.partial else ""), stopped)
        except KeyboardInterrupt:
            _interrupted(f"the predictions of the first {printed:,} of {len(items):,} texts were printed" if printed
                         else "no text was classified" + (f" (it was {phase})" if phase else ""), stopped)


def _predicted(r: dict) -> str:
    """One prediction as one tab-separated line (for `cut -f`): plain text, not Rich, which turns tabs into spaces."""
    given = "\t".join(_one_line(r[k]) for k in ("text", "text_pair") if k in r)
    if "labels" in r:
        shown = ", ".join(f"{_listed(x['label'])} {x['score']:.3f}" for x in r["labels"]) or "(none)"
        return f"{shown}\t{given}"
    if "label" not in r:  # regression: the predicted value
        return f"{r['score']:.3f}\t{given}"
    # a label name can hold a tab or a line break too (a quoted CSV cell): escaped like the text
    return f"{_one_line(r['label'])}\t{r['score']:.3f}\t{given}"


def _listed(label: str) -> str:
    """A multi-label prediction's label in its comma-separated list: quoted when it holds a comma (a column named
    with --label-columns' JSON list), as the trainer's column lists quote it; `toxic, severe 0.487` read as two
    labels, one of them without a score."""
    return repr(label) if "," in label else _one_line(label)


_SHOWN_ESCAPED = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def _one_line(text: str) -> str:
    """A text as one field of one output line: a CSV cell's newlines and tabs shown escaped (\\n, \\t), so each
    prediction stays one tab-separated line (--json carries the text as it is)."""
    return text.translate(_SHOWN_ESCAPED)


def evaluate(
    model: ModelArg,
    file: Annotated[str, typer.Argument(
        metavar="FILE",
        help="Labelled rows: a .csv, .tsv or .jsonl file, optionally .gz, local or gs://, with the model's text "
        "and label columns (or those the options name).", show_default=False)],
    text_column: TextColumnOpt = None,
    text_pair_column: TextPairColumnOpt = None,
    label_column: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--label-column", metavar="NAME", help="The column that holds the label (a regression's target) [default: "
        "the one the model was trained on].")] = None,
    label_names: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--label-names", metavar="A,B,C", help="The file's labels are ids: the names they stand for, in id order, "
        "comma-separated or a JSON list (MNLI's 0,1,2: entailment,neutral,contradiction) [default: the model's own "
        "order, where it has one].")] = None,
    threshold: ThresholdOpt = None,
    report_dir: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--report", metavar="DIR", help="Also draw the evaluation into DIR as ftcli report draws a run (its "
        "confusion matrix, per-label F1 bars or predicted against true, and report.md): a new or empty folder, or "
        "an earlier report's. Needs matplotlib: pip install 'ftcli[report]'.", show_default=False)] = None,
    trial: TrialOpt = None,
    json_out: JsonOpt = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Score a model on a labelled file: the metrics its training run reports (accuracy, macro-F1 and the
    task's own; multi-label: micro- and macro-F1; regression: Pearson, Spearman and MSE), the loss, and each label's
    precision, recall and F1 (multi-label: at the threshold). --json prints one object, with a single-label model's
    confusion matrix.

    The rows are read as the trainer reads an eval file; the labels must be the model's (whole numbers: its ids,
    where its labels have an id order, or those of --label-names).

    Examples:

      ftcli evaluate ftcli-runs/20261125-120000-ab12/model test.csv

      ftcli evaluate last gs://my-bucket/data/test.jsonl --json

      ftcli evaluate last test.csv --report ./reports/test
    """
    from ftcli import models
    from ftcli.cli.watch import stop_signals_interrupt
    from ftcli.output import note, transfer

    _check_options(threshold, text_column, text_pair_column, ("--label-column", label_column))
    from ftcli_trainer.config import NameListError, name_list

    try:
        names = name_list(label_names, "--label-names") if label_names is not None else ()
    except NameListError as e:
        raise UsageError(str(e.problem), hint=e.problem.hint) from None
    if label_names is not None and not names:
        raise UsageError("--label-names is empty", hint="give the names the file's label ids stand for, in order")
    if twice := sorted({n for n in names if names.count(n) > 1}):
        # (two ids as one label: MNLI's neutral rows counted as entailment, accuracy 0.70 where it was 0.40)
        raise UsageError(f"--label-names names {', '.join(map(repr, twice))} twice: each id stands for its own label",
                         hint="give each of the file's label ids its own name, in id order")
    if report_dir is not None:  # before any work: an hour of scoring, then "not empty" or "no matplotlib"
        from ftcli.report import earlier_report, require_matplotlib

        require_matplotlib("ftcli evaluate --report")
        earlier_report(report_dir, "--report")
    import time

    from ftcli.output import Waiting
    from ftcli.report import ReportInterrupted, nothing_written

    scored: list[int] = []  # (done, of): how far the scoring got
    phase = f"reading {file}"  # what was under way before the scoring began, for an interruption there
    # SIGTERM or SIGHUP (a CI step's timeout, `docker stop`, a closed terminal) as Ctrl-C, in every phase: they killed
    # ftcli without a word (the model's staging left in the cache, a gs:// file's copy in the temporary folder, the
    # report's staging in DIR, each for the next run to clean), and Ctrl-C said only "interrupted", nothing of what
    # the model cache or the report's folder held
    with stop_signals_interrupt() as stopped:
        try:
            columns, rows = models.read_table(file)  # before the model is downloaded: a bad file is said first
            phase = "getting the model"
            with transfer("downloading the model") as progress:
                path = models.model_folder(model, project, region, notify=note, progress=progress, trial=trial,
                                           command="ftcli evaluate")
            phase = "loading the model"  # (and reading the rows' texts and labels; then progress(0, n))
            # a spinner with the count on a terminal, a line a minute in a log: a big file on a CPU takes minutes to
            # hours
            waiting, began = Waiting(), time.monotonic()

            def progressed(done: int, n: int) -> None:
                scored[:] = [done, n]
                waiting.update(f"scored {done:,} of {n:,} examples", time.monotonic() - began)

            try:
                evaluation = models.evaluate(
                    path, file, columns, rows, text_column=text_column, text_pair_column=text_pair_column,
                    label_column=label_column, threshold=threshold, label_names=names, notify=note,
                    progress=progressed)
            finally:
                waiting.stop()
            result = evaluation.metrics
        except KeyboardInterrupt as e:
            if isinstance(e, models.DownloadInterrupted):
                said = e.said + (CACHED_AGAIN if e.partial else "")
            elif scored:
                said = f"{scored[0]:,} of {scored[1]:,} examples were scored, no metrics printed"
            else:
                said = f"no example was scored (it was {phase})"
            if report_dir is not None:  # (a folder is only ever written by the report's drawing)
                said += "; " + nothing_written(report_dir, report_dir.is_dir())
            _interrupted(said, stopped)
        # The metrics before the report: a signal while it was drawn (seconds, after perhaps an hour of scoring) lost
        # them, since they were printed after it. A signal while they are printed (a SIGTERM behind a reader that
        # stopped reading) is said here too: outside the handling above, it ended with the app's bare "interrupted"
        # and exit 130, a SIGTERM reported as a Ctrl-C, nothing said of the scoring nor of --report's folder.
        try:
            _show_evaluation(result, file, path, json_out)
        except KeyboardInterrupt:
            said = f"all {result['examples']:,} examples were scored, the metrics were cut short as they were printed"
            if report_dir is not None:
                said += "; " + nothing_written(report_dir, report_dir.is_dir())
            _interrupted(said, stopped)
        if report_dir is None:
            return
        from ftcli.report import evaluation_run, write_report

        # The report's whole making is said as what DIR holds, its last line too: the run made of the evaluation (before
        # write_report, whose own interruptions say what DIR holds) and "report in DIR" (after it) were outside this
        # handling, and a SIGTERM there said a plain "interrupted" (with exit 130 before the drawing: the app's).
        existed, files = report_dir.is_dir(), None
        try:
            files = write_report(evaluation_run(path, result, evaluation.labels, evaluation.logits), report_dir,
                                 say=note, flag="--report")
            note(f"report in {report_dir}: {', '.join(f.name for f in files)}")
        except ReportInterrupted as e:  # while the report was drawn or moved in: what DIR holds now
            _interrupted(f"the metrics are printed above; {e.said}", stopped)
        except KeyboardInterrupt:
            said = (f"the report is written, whole, in {report_dir}" if files is not None
                    else nothing_written(report_dir, existed))
            _interrupted(f"the metrics are printed above; {said}", stopped)


def _show_evaluation(result: dict, file: str, path: Path, json_out: bool) -> None:
    """evaluate's metrics: one table of the scalar ones and one of each label's (a regression has none), or --json."""
    from ftcli.output import Column, escape, show_list, show_one
    from ftcli_trainer import metrics

    if json_out:
        show_one(result, (), json_out=True)
        return
    multi, regression = "threshold" in result, "labels" not in result
    names = metrics.scalar_names(tuple(k for k in ("matthews_correlation", "f1") if k in result), multi, regression)

    def number(key: str) -> Callable[[dict], str]:
        return lambda r: f"{r[key]:.4f}"

    # multi-label: the threshold its F1s are at (--threshold's or the model's; the table did not say which)
    shown = [("threshold", lambda r: f"{r['threshold']:g}")] if multi else []
    show_one(result, [*shown, *((metrics.SHOWN.get(k, k.replace("_", " ")), number(k)) for k in names)],
             json_out=False,
             title=f"{escape(file)}: {result['examples']:,} examples, model {escape(str(path))}")
    if not regression:
        per = [{"label": name, **scores} for name, scores in result["per_label"].items()]
        show_list(per, [Column("LABEL", lambda r: r["label"]),
                        *(Column(h, number(k), justify="right", shrink=False)
                          for h, k in (("PRECISION", "precision"), ("RECALL", "recall"), ("F1", "f1"))),
                        Column("SUPPORT", lambda r: f"{r['support']:,}", justify="right", shrink=False)],
                  json_out=False)


def register(app: typer.Typer) -> None:
    app.command("download")(download)
    app.command("predict")(predict)
    app.command("evaluate")(evaluate)
