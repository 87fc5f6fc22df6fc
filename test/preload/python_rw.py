"""File I/O as a Python program does it, for the preload tests (run_program_case.sh, case python).

Writes files in the directory given as the only argument through Python's buffered io (several
writes, seek, overwrite, flush, os.fsync), through os-level calls (pwrite, pread, truncate,
O_APPEND) and re-reads them; prints sizes and SHA-256 digests, never a path, so that the plain
run and the preloaded run print identical text. Content is deterministic (no randomness, no
time) so the two runs also leave identical files.
"""
import hashlib
import os
import sys


def block(seed, n):
    """Deterministic bytes of every value: SHA-256 in counter mode."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d:%d" % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


def digest(path):
    with open(path, "rb") as f:
        data = f.read()
    return "size %d sha256 %s" % (len(data), hashlib.sha256(data).hexdigest())


def main():
    out = sys.argv[1]
    path = os.path.join(out, "python.dat")
    expected = bytearray()
    with open(path, "w+b") as f:
        for i in range(64):
            b = block(i, 10000 + 37 * i)
            f.write(b)
            expected += b
        # Overwrite in the middle, across the boundary between two writes.
        f.seek(123456)
        f.write(b"X" * 5000)
        expected[123456:128456] = b"X" * 5000
        f.flush()
        os.fsync(f.fileno())
        # Extend past the end with a hole: the gap reads back as zeros.
        f.seek(len(expected) + 4096)
        f.write(b"after the hole")
        expected += b"\0" * 4096 + b"after the hole"
        f.flush()
        f.seek(0)
        back = f.read()
    buffered_ok = back == bytes(expected)
    print("buffered io: read back equal to written:", buffered_ok)
    print("buffered io:", digest(path))

    # os-level calls on the same file: pwrite/pread, ftruncate, then O_APPEND.
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, b"pwrite!", 1000)
        expected[1000:1007] = b"pwrite!"
        print("pread sees pwrite:", os.pread(fd, 7, 1000) == b"pwrite!")
        os.ftruncate(fd, 300000)
        del expected[300000:]
        os.fsync(fd)
    finally:
        os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for i in range(10):
            os.write(fd, b"append %d\n" % i)
            expected += b"append %d\n" % i
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        final = f.read()
    print("os calls: file equal to expected:", final == bytes(expected))
    print("os calls:", digest(path))

    # Text mode, line by line, the way scripts write reports.
    text = os.path.join(out, "python.txt")
    with open(text, "w") as f:
        for i in range(20000):
            f.write("line %d %s\n" % (i, hex(i * 2654435761 % 2**32)))
    with open(text) as f:
        lines = f.readlines()
    print("text: %d lines, last %r" % (len(lines), lines[-1]))
    print("text:", digest(text))
    ok = buffered_ok and final == bytes(expected) and len(lines) == 20000
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
