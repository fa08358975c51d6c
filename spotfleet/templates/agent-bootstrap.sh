#!/bin/bash
# spotfleet node bootstrap (rendered by spotfleet.providers.bootstrap; also used by terraform).
# Installs the same spotfleet version as the controller, writes the agent config
# with the controller URL and this instance's secret, and runs the agent under systemd.
set -euo pipefail
umask 077
install -d -m 0755 /opt/spotfleet /etc/spotfleet /var/lib/spotfleet
if ! /opt/spotfleet/venv/bin/spotfleet --version 2>/dev/null | grep -qx "${spotfleet_version}"; then
  python3 -m venv /opt/spotfleet/venv
  # the core only: what the node agent needs (no cloud SDK, numpy, matplotlib or psycopg)
  /opt/spotfleet/venv/bin/pip install --quiet "spotfleet==${spotfleet_version}"
fi
cat > /etc/spotfleet/agent.yaml <<'AGENT_CONFIG'
controller_url: ${controller_url}
token: ${agent_token}
cluster: ${cluster}
metadata: ${metadata_flavor}
work_dir: /var/lib/spotfleet
AGENT_CONFIG
chmod 0600 /etc/spotfleet/agent.yaml
cat > /etc/systemd/system/spotfleet-agent.service <<'UNIT'
[Unit]
Description=spotfleet node agent
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=/opt/spotfleet/venv/bin/spotfleet agent --config /etc/spotfleet/agent.yaml
Restart=always
RestartSec=2
KillMode=mixed
${extra_env_lines}
[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now spotfleet-agent.service
