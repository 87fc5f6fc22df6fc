# The SQL both SQLite benchmarks feed to sqlite3: n single-row INSERTs, each its own transaction
# (autocommit), with synchronous=FULL, rows drawn from a fixed seed so every run writes the same.
#   awk -v n=COUNT -v jm=DELETE|WAL|WAL-EXCL -f sqlite_load.awk
# WAL-EXCL is WAL with locking_mode=EXCLUSIVE (no shared-memory index, fewer lock calls).
BEGIN {
  if (jm == "") jm = "DELETE"
  if (jm == "WAL-EXCL") { print "PRAGMA locking_mode=EXCLUSIVE;"; jm = "WAL" }
  print "PRAGMA journal_mode=" jm ";"
  print "PRAGMA synchronous=FULL;"
  print "CREATE TABLE t(id INTEGER PRIMARY KEY, x INTEGER NOT NULL, y TEXT NOT NULL);"
  s = 7
  for (i = 0; i < n; i++) {
    s = (s * 16807) % 2147483647
    printf "INSERT INTO t(x, y) VALUES(%d, %c%s%c);\n", s % 1000003, 39, substr("abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789", 1, 1 + s % 70), 39
  }
}
