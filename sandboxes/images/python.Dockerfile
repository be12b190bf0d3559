# Image of the docker sandbox backend (sandboxes/docker.py builds it on first use as
# agentrl-sandbox-python:3.11). Code runs as nobody (65534) in /sandbox; the container gets
# no network, no capabilities, no-new-privileges, pids/memory limits and rlimits at run time.
FROM python:3.11-slim
RUN mkdir -p /sandbox && chown 65534:65534 /sandbox && chmod 0755 /sandbox
ENV HOME=/sandbox PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /sandbox
USER 65534:65534
CMD ["python3", "--version"]
