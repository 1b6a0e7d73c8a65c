#!/usr/bin/env python3
"""Stands in for systemd's notification socket: binds a Unix datagram
socket at argv[1] and appends each message it receives to argv[2], one
line per message ("<monotonic seconds> <message with newlines as |>")."""
import os
import socket
import sys
import time

path, out = sys.argv[1], sys.argv[2]
if os.path.exists(path):
    os.unlink(path)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
with open(out, "a", buffering=1) as f:
    f.write("listening\n")
    while True:
        data = s.recv(4096).decode(errors="replace")
        f.write("%.3f %s\n" % (time.monotonic(), data.strip().replace("\n", "|")))
