#!/usr/bin/env python3
"""Each concern of the relay's loop writes its own state (lib/relay/relay_int.h): every state
struct there opens with "Written by A.c" (or "A.c and B.c"), and no other file of lib/relay/
may assign to its fields (=, +=, ++, ...), take their address or the struct's (&r->claim, a
way to write it through a pointer). Other files read it, or call the owner's functions.
Caught: the forms the house style writes (r->part.field ...); an alias made some other way is
not. TAP.
    owners.py SOURCE_ROOT"""
import glob
import os
import re
import sys

root = sys.argv[1]
header = open(os.path.join(root, 'lib/relay/relay_int.h')).read()
owners = {}  # struct name -> set of files
lines = header.split('\n')
for i, line in enumerate(lines):
    if not line.startswith('/* Written by '):
        continue
    j = i
    while '*/' not in lines[j]:
        j += 1
    comment = ' '.join(l.strip() for l in lines[i:j + 1])
    m = re.match(r'struct (\w+) \{', lines[j + 1])
    who = re.match(r'/\* Written by (.*?)(?::|\.\s|\.$|\*/)', comment)
    if m and who:
        owners[m.group(1)] = set(re.findall(r'\b\w+\.c\b', who.group(1)))
members = dict((s, mm) for s, mm in re.findall(r'^    struct (\w+) (\w+);', header[header.index('struct relay {'):], re.M))
n = 0
bad = 0
if len(owners) < 6:
    n += 1
    bad = 1
    print(f"not ok {n} - only {len(owners)} state structs with 'Written by' found in relay_int.h: the reader no longer matches it")
write = r'(?:\[[^\]]*\]|\.\w+)*\s*(?:[-+*/|&]?=(?!=)|\+\+|--)'
for struct, files in sorted(owners.items()):
    member = members.get(struct)
    if not member:
        continue
    pat = re.compile(r'(?:r|relay)->' + member + r'\.(\w+)' + write + r'|\+\+\s*(?:r|relay)->' + member +
                     r'\.(\w+)|&(?:r|relay)->' + member + r'\b(?:\.(\w+))?')
    for path in sorted(glob.glob(os.path.join(root, 'lib/relay/*.c'))):
        name = os.path.basename(path)
        if name in files:
            continue
        for i, line in enumerate(open(path), 1):
            m = pat.search(line)
            if m:
                n += 1
                bad = 1
                print(f"not ok {n} - lib/relay/{name}:{i} writes {member} ({struct}, written by "
                      f"{' and '.join(sorted(files))} only): {line.strip()}")
n += 1
print(f"ok {n} - {len(owners)} state structs, each written by its own files")
print(f"1..{n}")
sys.exit(bad)
