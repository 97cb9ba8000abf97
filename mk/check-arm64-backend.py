#!/usr/bin/env python3
"""Three Prometheus rules APIs on one port for mk/check-arm64.sh: /shard0-a and /shard0-b (two
replicas of shard 0, the same firing alert) and /shard1 (a recording rule). Prints the port."""

import http.server
import json


def answer(group, rule):
    return {"status": "success", "data": {"groups": [{
        "name": group, "file": f"/etc/prometheus/rules/{group}.yaml", "interval": 30, "limit": 0,
        "evaluationTime": 0.001, "lastEvaluation": "2024-01-01T00:00:00Z", "rules": [rule]}]}}


ALERT = {
    "type": "alerting", "state": "firing", "name": "AlwaysFiring", "query": "vector(1)",
    "duration": 0, "keepFiringFor": 0, "labels": {"severity": "page"}, "annotations": {},
    "alerts": [{"labels": {"alertname": "AlwaysFiring", "severity": "page"}, "annotations": {},
                "state": "firing", "activeAt": "2024-01-01T00:00:00Z", "value": "1e+00"}],
    "health": "ok", "evaluationTime": 0.0001, "lastEvaluation": "2024-01-01T00:00:00Z",
}
RECORD = {
    "type": "recording", "name": "job:up:sum", "query": "sum by (job) (up)", "health": "ok",
    "evaluationTime": 0.0001, "lastEvaluation": "2024-01-01T00:00:00Z",
}
ANSWERS = {
    "/shard0-a/api/v1/rules": answer("common", ALERT),
    "/shard0-b/api/v1/rules": answer("common", ALERT),
    "/shard1/api/v1/rules": answer("extra", RECORD),
}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        found = ANSWERS.get(self.path.split("?")[0])
        body = json.dumps(found).encode() if found else b"{}"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
