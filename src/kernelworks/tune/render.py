"""A tuning run as a table (every candidate's verdict and time) and a plot (best time against candidates)."""

from __future__ import annotations

from pathlib import Path

from kernelworks.tune.engine import CaseTuning


def _config(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "default (the op's own choice)"


def table(results: list[CaseTuning]) -> str:
    """Markdown: per case, the winner and why, then every candidate tried in search order."""
    lines: list[str] = []
    for r in results:
        how = f"{r.strategy}, compiled for {r.target}" if r.target else r.strategy
        lines.append(f"\n**{r.op}{' backward' if r.mode == 'bwd' else ''} · {r.case}**: "
                     f"{'winner ' + _config(r.winner) if r.winner is not None else 'no winner'}"
                     f" — {r.reason} ({len(r.candidates)} tried{', ' + how if how else ''}, {r.seconds:.1f} s)\n")
        if not r.candidates:
            continue
        compiled = any(c.registers is not None for c in r.candidates)
        extra = (" regs · spill B |", "---|") if compiled else ("", "")
        lines += [f"| # | config | verdict | ms (median) | p20–p80 |{extra[0]}", f"|---|---|---|---|---|{extra[1]}"]
        for i, c in enumerate(r.candidates):
            ms = "—" if c.ms is None else f"{c.ms:.4f}"
            band = "—" if c.p20_ms is None else f"{c.p20_ms:.4f}–{c.p80_ms:.4f}"
            verdict = c.verdict if not c.detail else f"{c.verdict}: {c.detail}"
            res = ""
            if compiled:
                res = " — |" if c.registers is None else f" {c.registers} · {c.spill_bytes} |"
            lines.append(f"| {i + 1} | {_config(c.config)} | {verdict} | {ms} | {band} |{res}")
    return "\n".join(lines)


def plot(results: list[CaseTuning], path: Path) -> Path:
    """Best time so far against candidates tried, one line per case (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        curve = r.best_so_far
        if any(v is not None for v in curve):
            ax.step(range(1, len(curve) + 1), [float("nan") if v is None else v for v in curve], where="post",
                    label=r.case)
    ax.set_xlabel("candidates tried")
    ax.set_ylabel("best time so far (ms)")
    ax.set_title(f"kw tune {results[0].op if results else ''}")
    if results:
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
