"""trainwarden's own judgement, as the decision bench (decisions.py) uses it: `trainwarden backtest` over the
corpus with the catalog's policies and the peers' stops files (`--stops`, each file's `rule` scored as a
policy of its own), one part of the corpus at a time (`--runs <split label>=<part>`), read back from its
JSON report; and the table made of the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass


@dataclass
class Figures:
    """One policy's or one peer-setting's figures on one part of the corpus (backtest's `Tally`)."""

    runs: int
    stops: int
    false_stops: int
    healthy_stopped: int
    caught: int
    bad_runs: int
    gpu_hours_saved: float
    lost_gpu_hours: float
    median_lead_seconds: float | None
    unmeasured: int

    @classmethod
    def of(cls, totals: dict) -> "Figures":
        return cls(
            runs=totals["runsSeen"],
            stops=totals["stopped"],
            false_stops=totals["falseStops"],
            healthy_stopped=totals["healthyStopped"],
            caught=totals["caught"],
            bad_runs=totals["badRunsSeen"],
            gpu_hours_saved=totals["gpuHoursSaved"],
            lost_gpu_hours=totals["lostGpuHours"],
            median_lead_seconds=totals.get("medianLeadSeconds"),
            unmeasured=totals.get("unmeasured", 0),
        )


class BacktestError(Exception):
    pass


class Backtest:
    """`trainwarden backtest` on one corpus, its reports kept in `out`."""

    def __init__(self, binary: str, streams: list[str], out: str, split_label: str):
        self.binary, self.streams, self.out, self.split_label = binary, streams, out, split_label

    def run(self, name: str, part: str, policies: list[str], stops: list[str]) -> "Judged":
        command = [self.binary, "backtest", "--output", "json", "--runs", f"{self.split_label}={part}"]
        command += policies
        for path in stops:
            command += ["--stops", path]
        command += self.streams
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            shown = " ".join(command[:8]) + (" ..." if len(command) > 8 else "")
            raise BacktestError(f"{shown}: exit {done.returncode}\n{done.stderr.strip()}")
        path = os.path.join(self.out, f"{name}.json")
        with open(path, "w") as f:
            f.write(done.stdout)
        return Judged(json.loads(done.stdout)["backtest"], path)


class Judged:
    """One backtest report: figures by policy name or external rule name."""

    def __init__(self, report: dict, path: str):
        self.path = path
        if len(report["candidates"]) != 1:
            raise BacktestError(f"{path}: {len(report['candidates'])} candidates, 1 expected (no --set)")
        candidate = report["candidates"][0]
        self.by_name = {p["policy"]: Figures.of(p) for p in candidate["policies"]}
        self.together = Figures.of(candidate["together"]) if candidate.get("together") else None
        judged = [r for r in report["runs"] if r["name"] not in set(report.get("incomplete", []))]
        self.runs = len(judged)
        self.bad_runs = sum(n for label, n in report.get("outcomes", {}).items() if label != "healthy")
        self.judgement = (
            f"a stop is false when the level (rolling median of {report['smoothing']} logged values) later "
            f"improved by more than {report['tolerance'] * 100:g} % and more than {report['minImprovement']:g}"
        )

    def policy(self, name: str) -> Figures:
        """A catalog policy's figures, by its metadata.name (in namespace default, as the catalog's are)."""
        for reference, figures in self.by_name.items():
            if reference.split("/")[-1] == name:
                return figures
        raise BacktestError(f"{self.path}: no policy named {name}")

    def rule(self, name: str) -> Figures:
        """An external rule's figures; a rule that stopped nothing is not in the report: zeros."""
        if name in self.by_name:
            return self.by_name[name]
        return Figures(self.runs, 0, 0, 0, 0, self.bad_runs, 0.0, 0.0, None, 0)


def lead(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def table(rows: list[tuple[str, Figures]]) -> str:
    head = (
        "| policy / peer-setting | stops | false stops | healthy runs stopped | bad runs caught | "
        "GPU-h saved | GPU-h of good work lost | median lead time |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for label, f in rows:
        lines.append(
            f"| {label} | {f.stops} | {f.false_stops} | {f.healthy_stopped} | {f.caught} of {f.bad_runs} | "
            f"{f.gpu_hours_saved:.1f} | {f.lost_gpu_hours:.1f} | {lead(f.median_lead_seconds)} |"
        )
    return head + "\n".join(lines) + "\n"


