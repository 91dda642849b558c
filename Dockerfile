# Beacon's image: one image for web (gunicorn), worker and beat.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    BEACON_DATA_DIR=/data STATIC_ROOT=/app/staticfiles
WORKDIR /app

# gcc and the LDAP/SASL headers build python-ldap (django-auth-ldap) during pip install
RUN apt-get update && apt-get install -y --no-install-recommends slurm-client openssh-client \
    gcc libc6-dev libldap2-dev libsasl2-dev \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /app --uid 1000 beacon && mkdir -p /data && chown beacon /data
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# collectstatic needs a key but must not bake one into the image
RUN SECRET_KEY=build-only-key-build-only-key-build-only BEACON_DATA_DIR=/tmp \
    python manage.py collectstatic --noinput -v0

USER beacon
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi", "-b", "0.0.0.0:8000", "-w", "4", "--timeout", "120", "--access-logfile", "-"]
