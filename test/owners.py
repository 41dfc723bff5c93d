#!/usr/bin/env python3
"""Each concern of the relay's loop owns its state (lib/relay/relay_int.h): every state struct
there opens with "Written by A.c" (or "A.c and B.c", or "A.c (B.c reads it for ...)"), and
no other file of lib/relay/ touches its fields: not to write them (=, +=, ++, ...), not to
take their address or the struct's (&r->claim), not to read them. Other files call the
owners' functions. Caught: the forms the house style writes (r->claim.field, relay->...); an
alias made some other way is not. TAP.
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
    touch = re.compile(r'(?:\br|\brelay)->' + member + r'\b')
    writes = re.compile(r'(?:\br|\brelay)->' + member + r'\.\w+' + write + r'|\+\+\s*(?:r|relay)->' + member +
                        r'\.|&(?:r|relay)->' + member + r'\b')
    for path in sorted(glob.glob(os.path.join(root, 'lib/relay/*.c'))):
        name = os.path.basename(path)
        if name in files:
            continue
        for i, line in enumerate(open(path), 1):
            if touch.search(line):
                n += 1
                bad = 1
                verb = 'writes' if writes.search(line) else 'reads'
                print(f"not ok {n} - lib/relay/{name}:{i} {verb} {member} ({struct}, written by "
                      f"{' and '.join(sorted(files))} only): {line.strip()}")
n += 1
print(f"ok {n} - {len(owners)} state structs, each touched by its own files only")
print(f"1..{n}")
sys.exit(bad)
