"""`kraftcore.runtime.collector`: the garbage collector settings of a node's own process.
Each case runs in a fresh interpreter, so this process's collector is left alone."""

import subprocess
import sys
import textwrap


def _run(code):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_settle_freezes_what_is_alive_and_raises_the_young_threshold():
    out = _run("""
        import gc
        from kraftcore.runtime import collector
        older = gc.get_threshold()[1:]
        assert gc.get_freeze_count() == 0
        collector.settle()
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, *older), gc.get_threshold()
        assert gc.get_freeze_count() > 1000, gc.get_freeze_count()
        print("ok")
    """)
    assert out == ["ok"]


def test_cycles_made_after_settle_are_still_collected():
    out = _run("""
        import gc, weakref
        from kraftcore.runtime import collector
        collector.settle()

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        del a, b
        assert alive() is not None  # a cycle: reference counting alone cannot free it
        gc.collect()
        print(alive() is None)
    """)
    assert out == ["True"]


def test_a_threshold_the_program_already_chose_is_kept():
    out = _run("""
        import gc
        from kraftcore.runtime import collector
        gc.set_threshold(200_000, 5, 5)
        collector.settle()
        print(*gc.get_threshold())
        gc.set_threshold(0)
        collector.settle()
        print(gc.get_threshold()[0])
    """)
    assert out == ["200000", "5", "5", "0"]
