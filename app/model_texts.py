"""The model manager's facts in words (no Qt): sizes, the hardware, the compute path and a proposed
placement of routed experts in RAM, a download's progress, a check's verdict, the submodels' nesting
states. The one place these are formatted; the model manager's state
(app/models_controller.py) and its dialog (app/widgets/model_manager.py) show what these say.
"""

from __future__ import annotations

from runtime.api import format_bytes

FINAL_WORDS = {"done": "Download complete and verified.",
               "paused": "Paused. Resume continues where it stopped, even after a restart.",
               "cancelled": "Cancelled; the partial files were removed."}


def size_text(n: int | None) -> str:
    return format_bytes(n) if n else "–"


def path_text(vp) -> str:
    """The compute path a variant's plan (runtime.store.planner.VariantPlan) would run, and where its
    routed experts would live when the planner proposes RAM for them."""
    return vp.compute_path + (f"; routed experts in RAM ({vp.placement})" if vp.placement else "")


def placement_text(vp) -> str:
    """The proposed placement of routed experts in RAM, in words (runtime/store/placement_plan.py)."""
    p = vp.proposed()
    return f"Routed experts in RAM, --cpu-experts {p.placement}: {p.reason}" if p is not None else ""


def hardware_text(hw) -> str:
    """The probe in one line. Without a GPU, the reason follows a colon: it often ends in the
    driver's own words in brackets, and `HardwareProbe.summary` would bracket it again."""
    if hw.gpu is None:
        return f"No NVIDIA GPU: {hw.no_gpu_reason or 'none found'}; {hw.ram_text()}"
    return hw.summary()


def progress_text(p) -> str:
    """A download's state in words: "DOWNLOADING: 1.2 GiB of 17.0 GiB, 48.0 MiB/s, 5 min 36 s left"."""
    speed = f"{format_bytes(p.speed_bps or 0, 'MiB')}/s"
    eta = f", {int(p.eta_s) // 60} min {int(p.eta_s) % 60} s left" if p.eta_s is not None else ""
    return (f"{p.state.upper()}: {size_text(p.done_bytes)} of {size_text(p.total_bytes)}, {speed}{eta}"
            + (f" — {p.message}" if p.message else ""))


def verify_text(report, name: str = "") -> str:
    """`name`: what the models list calls it (a folder "demo" imported as "demo-2" is "demo-2", as in the
    table and the picker); else the folder's name."""
    name = name or report.folder.name
    if not report.ok:
        return "Problems: " + "; ".join(report.problems)
    if report.checked == 0:  # an imported folder has no record of the hub's hashes to compare with
        return (f"{name}: its config, tensors and submodel table check out; it has no download "
                "record, so there were no file hashes to compare.")
    return f"{name} is intact: {report.checked} file hashes match the download record."


# What each submodel state means and what to do about it (runtime/checkpoint/submodel_table.py).
STATE_HELP = {
    "verified": "checked value by value against a sliced checkpoint (its elastic.json records which one)",
    "declared": "from the checkpoint's own elastic.json, not checked against a slice; Verify nesting… checks it "
                "against one",
    "estimated": "the catalog's estimate, fitted to published parameter counts, not a fact: its replies may be poor "
                 "and it never thinks by default; select the model and press Verify nesting… to check it against a "
                 "published slice",
}


def states_text(fits) -> tuple[str, str]:
    """The nested submodels' states in a word or three ("estimated", "1 of 2 verified": the table is
    wide already) and a tooltip saying each one's, what it means and what to do; the parent is the
    checkpoint itself (verified)."""
    nested = list(fits[1:])
    if not nested:
        return ("–", "No nested submodels: only the parent, which is the checkpoint itself." if fits else "")
    states = [f.state for f in nested]
    if len(set(states)) == 1:
        text = states[0]
    elif "verified" in states:
        text = f"{states.count('verified')} of {len(states)} verified"
    else:
        text = ", ".join(f"{f.name} {f.state}" for f in nested)
    tip = [f"{f.name}: {f.state} — {STATE_HELP.get(f.state, '')}" for f in nested]
    return text, "\n".join([f"{fits[0].name}: the parent, the checkpoint itself", *tip])


def verdict_text(v) -> str:
    """One line about one nesting check (runtime.store.nesting.slice_check.SliceVerdict)."""
    source = v.label or v.slice
    if v.cancelled:
        return "Nesting check cancelled; nothing was written."
    if v.report is None:
        return f"Nesting not checked against {v.slice}: {v.error}. The submodels' states are unchanged."
    r = v.report
    read = format_bytes(r.bytes_read) + (f", {format_bytes(v.slice_bytes)} of them from the hub" if v.hub else "")
    if r.verified and v.written is not None:
        return (f"Verified: {r.name} nests in this checkpoint ({r.checked_tensors} tensors of {source} compared, "
                f"{r.comparison}; {read} read). {r.name} is now verified in its elastic.json.")
    return f"Refused: {source} does not nest here: {r.problems[0]} ({read} read). Nothing was written."
