"""Watching a run inside its epochs (the paper's runs are 80-200 epochs of hours): a live progress line.

Display  -- where the line goes and how often: every N steps or by time, rank 0 only, the stream and clock
Progress -- where training is (epoch, step), images per second, the ETA of the epoch and of the run,
            and the running training losses L_A and L_B (Eqs. 5-6; one per model in a cohort) of the epoch so far
clock    -- h:mm:ss

On a terminal the line is rewritten in place (carriage return) about twice a second; when stdout
is a file or a pipe (a log), plain lines are printed, about every 30 s. --log-every N prints every
N steps instead. The training step does not wait for the device (mutual.py; under --amp fp16 its GradScaler
does), but reading the running loss does: so the loss is read only when a line is printed, never every step.
"""
import shutil
import string
import sys
import time
from typing import Callable, NamedTuple, Optional, TextIO


def clock(seconds):
    seconds = int(round(seconds))
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Display(NamedTuple):
    """Where the progress line goes and how often."""
    every: int = 0                   # print every N steps (0: by time, see the module's text)
    enabled: bool = True             # False on every rank but 0: nothing is printed
    stream: Optional[TextIO] = None  # None: sys.stdout (for tests: any file-like object)
    now: Callable[[], float] = time.monotonic  # a monotonic clock in seconds (for tests: a fake one)


class Progress:
    """The progress line of one process (pass Display(enabled=False) on every rank but 0).

    steps: training steps per epoch; epochs: Γ; batch_size: images per step, all ranks together.
    display: a Display (every N steps or by time; enabled; stream and clock, for tests).
    """

    def __init__(self, steps, epochs, batch_size, display=Display()):
        self.steps, self.epochs, self.batch_size, self.every = steps, epochs, batch_size, display.every
        self.enabled, self.stream, self.now = display.enabled, display.stream or sys.stdout, display.now
        self.tty = self.stream.isatty()
        self.interval = 0.5 if self.tty else 30.0  # seconds between lines when every == 0
        self.epoch, self.step = None, 0  # the epoch running (0-based; None before the first) and its last step
        self.t0 = self.last = self.now()
        self.t_train_end = None
        self.epoch_total, self.epoch_extra = [], []  # seconds of finished epochs; of their evaluation and writes
        self.width = 0  # characters of the line on the terminal now

    def start_epoch(self, epoch):
        t = self.now()
        if self.t_train_end is not None:  # the previous epoch, evaluation and checkpoint included
            self.epoch_total.append(t - self.t0)
            self.epoch_extra.append(t - self.t_train_end)
        self.epoch, self.step, self.t0, self.last, self.t_train_end = epoch, 0, t, t, None

    def end_training(self):
        """The epoch's last step is done; what follows until the next epoch is evaluation and writing."""
        self.t_train_end = self.now()

    def update(self, step, read_losses):
        """After step `step` (1-based). read_losses() -> [L_A, L_B, ...], the epoch's running means; it waits
        for the device, so it is called only when a line is due."""
        self.step = step
        if not self.enabled:
            return
        due = step % self.every == 0 if self.every else self.now() - self.last >= self.interval
        if not due:
            return
        losses = read_losses()
        self.last = t = self.now()  # after the read, so the rate counts the steps the device has finished
        self.show(self.line(step, t - self.t0, losses))

    def line(self, step, elapsed, losses):
        per_step = elapsed / step
        eta_epoch = (self.steps - step) * per_step
        later = self.epochs - self.epoch - 1  # epochs after this one
        if self.epoch_total:
            eta_run = eta_epoch + sum(self.epoch_extra) / len(self.epoch_extra) + later * (
                sum(self.epoch_total) / len(self.epoch_total))
        else:  # no epoch finished yet in this process: extrapolate from the training steps alone
            eta_run = eta_epoch + later * self.steps * per_step
        return (f"epoch {self.epoch + 1}/{self.epochs} step {step}/{self.steps} | "
                f"{self.batch_size * step / max(elapsed, 1e-9):.0f} img/s | loss "
                + " ".join(f"{name} {v:.3f}" for name, v in zip(string.ascii_uppercase, losses)) + " | "
                f"ETA epoch {clock(eta_epoch)} run {clock(eta_run)}")

    def show(self, text):
        if self.tty:  # cut to the terminal's width: a wrapped line cannot be rewritten in place
            text = text[:shutil.get_terminal_size((120, 24)).columns - 1]
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write("  " + text + "\n")
        self.stream.flush()

    def clear(self):
        """Wipe the in-place line, so that the next print starts on a clean line."""
        if self.enabled and self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0
