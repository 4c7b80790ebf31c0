"""The atheris (libFuzzer) harnesses: `python -m bench.fuzz.atheris_harness TARGET
[libFuzzer flags] [CORPUS_DIR ...]`, TARGET ``decode`` or ``batches`` (see
bench.fuzz.targets). Normally started by ``python -m bench.fuzz.atheris_run``, which seeds
the corpus, parses the statistics and triages findings.

Eddy's protocol modules are instrumented for coverage (atheris.instrument_imports), and
so are the bounds walkers the decoder generates at run time (exec'd source, which
instrument_imports and instrument_all skip): they are built for every advertised
(API, version) first, then each generated function is instrumented. kio's reader is
native code (Rust): its aborts are findings, but it adds no coverage of its own.

EDDY_FUZZ_KNOWN (comma-separated exception class names) lets known findings pass, so a
long run explores past them; they are still reported by a run without it.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from collections.abc import Callable

import atheris

with atheris.instrument_imports(include=["eddy.protocol", "eddy.mesh", "bench.fuzz.targets",
                                         "bench.fuzz.mesh_decoders", "eddy.security",
                                         "scramp"]):
    from bench.fuzz import mesh_decoders, sasl_tokens, targets
    from eddy.protocol import codec
    from eddy.protocol.apis import SUPPORTED

KNOWN = {n for n in os.environ.get("EDDY_FUZZ_KNOWN", "").split(",") if n}


def instrument_generated() -> int:
    """Build the bounds walkers of every advertised (API, version) and instrument every
    function compiled from generated source (file name ``<eddy...>``); returns how many."""
    build = getattr(codec, "_request_walker", None)
    if build is None:  # a decoder without generated walkers
        return 0
    for key, rng in SUPPORTED.items():
        for v in range(rng.min, rng.max + 1):
            build(key, v)
    funcs = [o for o in gc.get_objects() if isinstance(o, types.FunctionType)
             and o.__code__.co_filename.startswith("<eddy.")]
    for f in funcs:
        atheris.instrument_func(f)
    return len(funcs)


def _wrap(target: Callable[[bytes], None]) -> Callable[[bytes], None]:
    if not KNOWN:
        return target

    def run(data: bytes) -> None:
        try:
            target(data)
        except Exception as exc:
            if type(exc).__name__ not in KNOWN:
                raise

    return run


TARGETS: dict[str, Callable[[bytes], None]] = {
    "decode": targets.decode_frame,
    "batches": targets.validate_records,
    "mesh": mesh_decoders.check_input,  # mesh frames and every postcard message type
    "sasl": sasl_tokens.check_input,  # PLAIN and SCRAM tokens before authentication
}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        raise SystemExit(f"usage: python -m bench.fuzz.atheris_harness {{{','.join(TARGETS)}}} "
                         "[libFuzzer flags] [corpus dirs]")
    name = argv[1]
    n = instrument_generated()
    print(f"INFO: instrumented {n} generated functions", file=sys.stderr)
    # libFuzzer's -merge re-runs argv[0]: the runner passes an executable wrapper here
    argv0 = os.environ.get("EDDY_FUZZ_ARGV0") or argv[0]
    atheris.Setup([argv0, *argv[2:]], _wrap(TARGETS[name]))
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
