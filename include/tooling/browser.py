"""Headless Debian Chromium for reading a page as a user does: the monitoring page's tests, the Compose test and
``make screenshots``."""

from __future__ import annotations

import shutil
from pathlib import Path


def browser(download_dir: Path):
    """Headless Debian Chromium through chromedriver (never a downloaded browser), its profile in ``download_dir``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={download_dir}"):  # fmt: skip
        options.add_argument(flag)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    return webdriver.Chrome(options=options, service=service)


def wait_for(driver, css: str, timeout: float = 30):
    """The first element matching ``css`` once it is on the page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))
