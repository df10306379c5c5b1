# The gateway, serving the quick-start deployment by default.
#   docker build -t agent-policy-gateway .
#   docker run -p 127.0.0.1:8080:8080 agent-policy-gateway   (the quick start is anonymous: keep it on loopback)
# Mount your own config and policies and pass its path to run a real deployment:
#   docker run -p 8080:8080 -v $PWD/deploy:/deploy agent-policy-gateway gateway serve /deploy/gateway.yaml --host 0.0.0.0
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# The same install steps as .ci/run (a virtualenv, then the project), so CI proves them. The `otlp`
# extra (which the `test` extra CI installs includes) lets `tracing: {enabled: true}` export traces.
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN python3 -m venv /app/.venv && /app/.venv/bin/pip install --quiet --upgrade pip \
    && /app/.venv/bin/pip install --quiet -e '.[otlp]'
ENV PATH="/app/.venv/bin:$PATH"

COPY policies ./policies
COPY examples ./examples

RUN useradd --create-home --uid 10001 gateway && chown -R gateway /app/examples
USER gateway

EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz')"
CMD ["gateway", "serve", "examples/quickstart/gateway.yaml", "--host", "0.0.0.0"]
