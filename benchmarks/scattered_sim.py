"""Scratch: the scheduler against simulated endpoints in virtual time."""
from __future__ import annotations
import asyncio, random, sys, math
sys.path.insert(0, "/work/simtree" if len(sys.argv) > 1 and sys.argv[1] == "new" else "/work/main")
from flowkit.llm.endpoint import Limits
from flowkit.llm.scheduler import Scheduler
sys.path.insert(0, "/work/main")
RAW = len(sys.argv) > 1 and sys.argv[1] == "raw"
from tests.llm.fakes import VirtualTime, status_error

def simulate(rows=200, c=32, latency=0.2, scattered=0.0, ra=1.0, rpm=None, slice_s=1.0, seed=0, window=60.0):
    clock = VirtualTime()
    rng = random.Random(seed)
    limits = Limits(concurrency=c, max_retries=50, backoff_base=0.0, backoff_max=0.0)
    sched = Scheduler(limits, name="local", url="http://127.0.0.1:9/v1", clock=clock, sleep=clock.sleep, window=window)
    ep = {"refused": 0, "ok": 0}
    if rpm:
        rate = rpm / window; cap = max(1.0, rpm * slice_s / 60.0)
        ep["level"], ep["stamp"] = cap, 0.0
    async def call():
        if rpm:
            lvl = min(cap, ep["level"] + (clock.now - ep["stamp"]) * rate); ep["stamp"] = clock.now
            if lvl < 1:
                ep["level"] = lvl; ep["refused"] += 1; ep.setdefault("rt", []).append(clock.now)
                w = (1 - lvl) / rate
                await clock.sleep(0.005)
                raise status_error(429, {"retry-after-ms": str(math.ceil(w * 1000)), "Retry-After": str(math.ceil(w))})
            ep["level"] = lvl - 1
        if scattered and rng.random() < scattered:
            ep["refused"] += 1
            await clock.sleep(0.005)
            raise status_error(429, {"retry-after-ms": str(round(ra * 1000)), "Retry-After": str(ra)})
        await clock.sleep(latency)
        ep["ok"] += 1
        return "ok"
    done = []
    async def one():
        if RAW:
            async with RAW_SEM:
                while True:
                    try:
                        await call(); break
                    except Exception as exc:
                        await clock.sleep(float(exc.response.headers.get("retry-after-ms", "0")) / 1000)
        else:
            await sched.run(call)
        done.append(clock.now)
    async def body():
        global RAW_SEM
        RAW_SEM = asyncio.Semaphore(c)
        await asyncio.gather(*(one() for _ in range(rows)))
    simulate.done = done
    simulate.ep = ep
    asyncio.run(clock.drive(body()))
    ideal = rows / min(c / latency, (rpm / window) if rpm else 1e9)
    return clock.now, ideal, ep["refused"] / (ep["refused"] + ep["ok"]), sched.stats.overloads

SEEDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
ONLY = sys.argv[3] if len(sys.argv) > 3 else ""
if __name__ == "__main__":
    cases = [
        dict(scattered=0.1, ra=1.0), dict(scattered=0.1, ra=1.0, c=16), dict(scattered=0.4, ra=1.0),
        dict(scattered=0.1, ra=0.0), dict(scattered=0.1, ra=1.0, rows=2000),
        dict(rpm=600, rows=300), dict(rpm=600, rows=300, c=16), dict(rpm=1200, rows=300, c=16),
        dict(rpm=3000, rows=600, c=16, slice_s=2.0), dict(rpm=600, rows=300, slice_s=10.0),
        dict(rpm=3000, rows=1000, c=16), dict(rpm=600, rows=1500),
        dict(rpm=600, rows=300, scattered=0.05, ra=1.0),
    ]
    for case in cases:
        if ONLY and ONLY not in str(case): continue
        res = [simulate(seed=s, **case) for s in range(SEEDS)]
        t = sorted(r[0] for r in res); ideal = res[0][1]; m = t[len(t)//2]
        print(f"{case}: time med {m:.1f}s (min {t[0]:.1f} max {t[-1]:.1f}) ideal {ideal:.1f}s; of limit {ideal/m:.2f}; refused {sorted(round(r[2]*100,1) for r in res)}%", flush=True)
