# External process: checkpoints argv[1] in a loop for argv[2] seconds (alternating
# TRUNCATE and PASSIVE), then runs integrity_check; prints JSON with counts and the result.
import json, sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], timeout=2)
end = time.time() + float(sys.argv[2])
n = busy = errors = 0
while time.time() < end:
    try:
        mode = 'TRUNCATE' if n % 2 == 0 else 'PASSIVE'
        row = con.execute('PRAGMA wal_checkpoint(%s)' % mode).fetchone()
        busy += row[0]
    except sqlite3.Error as e:
        errors += 1
    n += 1
    time.sleep(0.005)
integrity = con.execute('PRAGMA integrity_check').fetchone()[0]
con.close()
print(json.dumps({'checkpoints': n, 'busy': busy, 'errors': errors, 'integrity': integrity}))
