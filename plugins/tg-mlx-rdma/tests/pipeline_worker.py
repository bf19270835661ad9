"""One rank of a pipeline fault test: ``mpirun -np 2 python pipeline_worker.py FAULT TIMEOUT``.

Both ranks load SmolLM2 as a 2-stage pipeline (``tg_llm.pipeline``) and rank 0 generates greedily. In the third
decode step the faulty rank breaks: ``kill`` (rank 1 dies), ``hang`` (rank 1 stops answering), ``hang0`` (rank 0
stops sending: it holds the pipeline and sleeps). The job must end on every rank with an error; a rank that
gets to the end prints ``NOT STOPPED``.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
from tg_llm.cli import default_model
from tg_llm.pipeline import connect, exit_on_failure, load, serve_stage

DECODES_BEFORE_FAULT = 2


class FaultyStage:
    """Rank 1's model, breaking at its third decode step."""

    def __init__(self, model: object, fault: str) -> None:
        self.model, self.fault, self.decodes = model, fault, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.model, name)

    def decode(self, steps: list[list[int]], blocks: int = 1) -> object:
        self.decodes += 1
        if self.decodes > DECODES_BEFORE_FAULT:
            print(f"rank 1: fault {self.fault}", flush=True)
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "hang":
                time.sleep(1000)
        return self.model.decode(steps, blocks)


def main() -> None:
    fault, timeout = sys.argv[1], float(sys.argv[2])
    stage = connect(2, timeout)
    model = load(stage, default_model(), None, 32)
    if not stage.first:
        try:
            serve_stage(FaultyStage(model, fault), stage)
        except BaseException as e:  # (as tg_llm.pipeline.run_stage: report and end the job)
            exit_on_failure(e, stage.rank)
        print("NOT STOPPED rank 1", flush=True)
        return
    token = int(np.argmax(model.forward_last([1, 2, 3, 4], 0)))
    for pos in range(4, 20):
        if fault == "hang0" and pos == 4 + DECODES_BEFORE_FAULT:
            with stage.lock:  # rank 0 stuck mid-call: no command, no heartbeat
                print("rank 0: fault hang0", flush=True)
                time.sleep(1000)
        token = int(np.argmax(model.decode([(0, token, pos)])[0]))
    print("NOT STOPPED rank 0", flush=True)
    model.close()


if __name__ == "__main__":
    main()
