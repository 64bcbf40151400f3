"""Monitoring configuration: Prometheus scrape config generator
(prometheus_config.py), Grafana dashboards generator (dashboards.py) and
provisioning, docker-compose.yml. See monitoring/README.md."""
