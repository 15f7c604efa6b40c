# External process: PRAGMA wal_checkpoint(TRUNCATE) [and integrity_check] on argv[1].
# Prints JSON {"busy": b, "log": l, "ckpt": c, "integrity": "..."}.
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=0)
row = con.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchone()
out = {'busy': row[0], 'log': row[1], 'ckpt': row[2]}
if len(sys.argv) > 2 and sys.argv[2] == 'integrity':
    out['integrity'] = con.execute('PRAGMA integrity_check').fetchone()[0]
con.close()
print(json.dumps(out))
