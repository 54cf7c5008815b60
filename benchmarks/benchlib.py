"""What every comparison's JSON result carries: the machine it ran on, when, under which load, and how.

benchmarks/run.py and the comparison scripts write one JSON file per comparison into benchmarks/results/ (see
benchmarks/report.py for the fields each one has); every file starts with meta(...), so the page can say, for every
figure, where and when it was measured and by which command.
"""
import json
import os
import platform
import time


def cpu_model():
    """The CPU's model name from /proc/cpuinfo ("unknown" where there is none), with its family and model numbers:
    cloud machines of different generations may share one name ("Intel(R) Xeon(R) Processor")."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's fields are enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def vector_isa():
    """The widest FP32 vector ISA this CPU has, named as the peak benchmark names it."""
    flags = cpu_flags()
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags and "fma" in flags:
        return "AVX2+FMA"
    if "sse2" in flags:
        return "SSE"
    return "scalar"


def machine():
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "isa": vector_isa(), "memory_gib": mem_gib,
            "kernel": platform.release()}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rel(path):
    """`path` relative to the repository when it is inside it, so that a page's commands read the same anywhere."""
    full = os.path.abspath(path)
    return os.path.relpath(full, ROOT) if full == ROOT or full.startswith(ROOT + os.sep) else path


def loadavg():
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def now():
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def meta(family, commands, quick=False, started=None):
    """The common header of a result file; `started` is (date, load) taken before the runs."""
    date, load = started or (now(), loadavg())
    return {"family": family, "source": "scripts/bench", "date": date, "finished": now(), "machine": machine(),
            "load_at_start": load, "load_at_end": loadavg(), "quick": bool(quick), "commands": list(commands)}


def start():
    return now(), loadavg()


def write_json(path, record):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)
