#!/usr/bin/env python3
"""Prints what a qkv page holds: the JSON in its <script id="qkv-data">.

usage: page_data.py PAGE.html EXPRESSION
EXPRESSION is Python over `d` (the data) and `j` (space-joined str of a
list): page_data.py run.csv.html "j(d['curves']['runs'][0]['columns']['loss']['steps'])".
Exits 1 when the page holds no data, or the data is not JSON.
"""
import json
import re
import sys

page = open(sys.argv[1], encoding="utf-8").read()
match = re.search(r'<script id="qkv-data" type="application/json">(.*?)</script>', page, re.S)
if not match:
    sys.exit(f"{sys.argv[1]}: no qkv-data script")
d = json.loads(match.group(1))


def j(values):
    return " ".join(str(v) for v in values)


print(eval(sys.argv[2], {"d": d, "j": j}))
