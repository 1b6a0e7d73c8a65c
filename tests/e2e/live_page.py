"""What the dashboard tests share: reads of a live page that redraws while it is read."""
import time

from selenium.common.exceptions import StaleElementReferenceException


def steady(fn, tries=40, pause=0.05):
    """fn(), again while a redraw replaces the elements it looks at (the last try raises)."""
    for _ in range(tries - 1):
        try:
            return fn()
        except StaleElementReferenceException:
            time.sleep(pause)
    return fn()
