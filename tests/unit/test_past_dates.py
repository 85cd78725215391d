"""Dates of the past: a relative date in a recalled turn is shown with the date it meant, and a
question naming a span of time is searched in that span."""

from datetime import datetime, timedelta, timezone

from langchain_core.messages import HumanMessage

import re

from core.past_dates import RELATIVE_HINT, dates_meant, names_a_date, question_range, resolve_relative
from prompts.reply_prompt import EPISODES_HEADER, build_prompt, parse_sections

SAID = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)  # a Monday


def dated(*texts: str, said: datetime = SAID) -> list[str]:
    """Those of ``texts`` that were given a date (a failure lists them all)."""
    return [t for t in texts if dates_meant(t, said)]


def test_yesterday_said_on_8_may_2023_reads_7_may_2023():
    assert resolve_relative("I went to a support group yesterday.", SAID) == "I went to a support group yesterday (7 May 2023)."


def test_relative_phrases_of_the_past_resolve_against_when_they_were_said():
    text = resolve_relative("last Saturday, last week, last month, last year, two days ago, 3 weeks ago, last summer", SAID)
    assert "last Saturday (6 May 2023)" in text
    assert "last week (the week before 8 May 2023)" in text
    assert "last month (April 2023)" in text and "last year (2022)" in text
    assert "two days ago (6 May 2023)" in text and "3 weeks ago (the week of 17 April 2023)" in text
    assert "last summer (summer 2022)" in text


def test_the_day_after_tomorrow_is_two_days_on_not_tomorrow():
    """It read "the day after tomorrow (9 May 2023)": the date of "tomorrow" inside it (LoCoMo's
    conv-47: a trip to Toronto put a day early). Without "the" too, and the day before yesterday."""
    assert resolve_relative("I'm leaving the day after tomorrow evening.", SAID) == "I'm leaving the day after tomorrow (10 May 2023) evening."
    assert dates_meant("The day after tomorrow", SAID) == "10 May 2023"
    assert dates_meant("leaving day after tomorrow", SAID) == "10 May 2023"
    assert dates_meant("back day before yesterday", SAID) == "6 May 2023"


def test_a_few_days_ago_gets_no_invented_day():
    """"A few" is not a number: it read as three ("a few days ago (5 May 2023)"), a day nobody said.
    The date it was said from is shown instead, as people write it."""
    assert resolve_relative("We got him a few days ago.", SAID) == "We got him a few days ago (a few days before 8 May 2023)."
    assert dates_meant("a few weeks ago, a few months ago, a few years ago", SAID) == (
        "a few weeks before 8 May 2023 a few months before May 2023 a few years before 2023"
    )
    assert dates_meant("a couple of days ago", SAID) == "6 May 2023"  # a couple is two


def test_the_other_day_is_a_few_days_before_it_was_said_but_not_the_second_of_two_days():
    """"I adopted another dog the other day", said on 22 November 2023, was read with no date;
    LoCoMo's answer (conv-44) is "a few days before November 22, 2023"."""
    said = datetime(2023, 11, 22, 9, 2, tzinfo=timezone.utc)
    assert resolve_relative("I adopted another dog the other day. Here's a photo!", said) == (
        "I adopted another dog the other day (a few days before 22 November 2023). Here's a photo!"
    )
    assert dates_meant("The other day was fun.", said) == "a few days before 22 November 2023"
    assert dates_meant("One day I swim, the other day I run.", said) == ""
    assert dates_meant("We hiked on Saturday and rested on the other day.", said) == "18 November 2023"  # the Saturday alone
    # A sentence about two days or a weekday: the other of them (a review, stop 61).
    for second in (
        "We spent a day in Rome and the other day in Florence.",
        "We spent 1 day in Rome and the other day in Florence.",
        "I'm free Tuesday, but the other day I'm busy.",
        "One of the days was sunny; the other day it rained.",
        "I can do it then, or the other day if you prefer.",
    ):
        assert dates_meant(second, said) == "", second


def test_on_the_15th_is_a_day_of_the_month_it_was_said_in_when_the_sentences_tense_says_so():
    """"I met back up with my teammates on the 15th", said on 17 August 2023, is 15 August (LoCoMo's
    conv-43: "When did John meet with his teammates after returning from Chicago?"); looking ahead,
    "on the 20th" is 20 August. Anything less sure gets no date: a wrong month is worse than none."""
    said = datetime(2023, 8, 17, 19, 54, tzinfo=timezone.utc)
    assert resolve_relative("I met back up with my teammates on the 15th after my trip.", said) == (
        "I met back up with my teammates on the 15th (15 August 2023) after my trip."
    )
    assert dates_meant("I’m flying out on the 20th!", said) == "20 August 2023"
    assert dates_meant("I'll see you on the 30th. I went home on the 2nd.", said) == "30 August 2023 2 August 2023"
    not_dated = [
        "We went there on the 20th.",  # past, yet after the 17th: July? no date
        "I'm flying out on the 5th!",  # ahead, yet before the 17th: September? no date
        "I went there on the 16th.",  # a UTC day off could be the 17th locally
        "The party is on the 20th.", "We need to go on the 5th.", "I went, and I'll go again on the 3rd.",  # no tense, or both
        "I got tickets for the concert on the 22nd!", "Did you hear the new store opens on the 20th?",
        "She said the meeting is on the 25th.", "Only 3 days left until the party on the 20th.",
        "Can’t wait for the show on the 20th, I got front-row seats!", "The next morning, on the 4th, it snowed.",
        "We were on the 3rd floor of the hotel.", "I finished it on the 3rd day of the trip.",  # not a date
        "on the 15th of August", "We arrived on the 15th Sept.", "We went on the 15th, in August.",  # the month is said
    ]
    for text in not_dated:
        assert dates_meant(text, said) == "", text
    assert dates_meant("We went on the 15th last month.", said) == "July 2023"  # "last month" alone


def test_a_weekdays_short_name_and_weekends_ago_are_dated_as_the_full_phrases_are():
    """"Last Fri I finally took my kids to the park" had no date (LoCoMo's conv-26, a temporal
    question's evidence), nor "this past weekend" or "two weekends ago"."""
    said = datetime(2023, 7, 17, tzinfo=timezone.utc)  # a Monday
    assert resolve_relative("Last Fri I took my kids to the park.", said) == "Last Fri (14 July 2023) I took my kids to the park."
    assert dates_meant("last Thurs, last tue and last Sat", said) == "13 July 2023 11 July 2023 15 July 2023"
    assert dates_meant("that roadtrip this past weekend", said) == "the weekend before 17 July 2023"
    assert dates_meant("camping two weekends ago", said) == "two weekends before 17 July 2023"
    assert dates_meant("a weekend ago, a couple of weekends ago, a few weekends ago", said) == (
        "a weekend before 17 July 2023 2 weekends before 17 July 2023 a few weekends before 17 July 2023"
    )
    for text in ("when I last sat there", "the last sun of summer", "the last Fri of the month", "I was the last fried",
                 "My last Sun Valley trip was great", "They last wed in June"):
        assert dates_meant(text, said) == "", text


def test_how_long_something_has_gone_on_is_dated_from_when_it_began():
    """"I've had them for 3 years now", said in January 2022, had no date; LoCoMo asks "When did
    Nate get his first two turtles?" (2019), and "How long has Melanie been practicing art?" of
    "Seven years now" (since 2016)."""
    said = datetime(2022, 1, 23, tzinfo=timezone.utc)
    assert resolve_relative("I've had them for 3 years now and they bring me joy!", said) == (
        "I've had them for 3 years now (since 2019) and they bring me joy!"
    )
    later = datetime(2023, 9, 13, tzinfo=timezone.utc)
    for text, meant in (
        ("Seven years now, and I've finally found my muses.", "since 2016"),
        ("Been playing it for a month now - it's tough.", "since August 2023"),
        ("I've known these friends for 4 years, since I moved.", "since 2019"),
        ("She has been vegan for a couple of years.", "since 2021"),
        ("I've been playing for about four months now.", "since about May 2023"),
        ("I've been playing for just under a year now.", "since about 2022"),
        ("It's been over 5 years now.", "since about 2018"),
        ("We've been in this house for 10 years now.", "since 2013"),
        ("The store has been closed for 2 months.", "since July 2023"),
        ("I've been married for 10 years and I love it.", "since 2013"),
    ):
        assert dates_meant(text, later) == meant, text
    # Nothing that ended no one knows when, lies ahead, is left, is a rate, a fraction, a contract
    # or a hypothetical: no date beats a wrong one (a review's sentences).
    for text in (
        "We were teammates for four years in high school.",
        "He was part of our family for 10 years.",
        "I'll stay for two years.",
        "I'll be gone for a month now.",
        "I've decided I'm going to travel for two months.",
        "I've been working on this for the past few months.",
        "I have 2 years of experience.",
        "In two years now we retire.",
        "In about two years now we'll retire.",
        "I'm locked in for the next 2 years now.",
        "My son is 3 years old.",
        "I'd love to live there for two years now that I'm retired.",
        "We dated for 2 years now we're married.",
        "Only a year now until graduation!",
        "I've got a year now to finish my thesis.",
        "It costs $10 a month now.",
        "I go twice a year now.",
        "It's been quite a month now.",
        "The lease is 12 months now instead of 6.",
        "It's been 1.5 years now.",
        "We've been dating for 2.5 years now.",
        "I've been dating her for a year and a half now.",
        "I've been here for a year and 6 months now.",
        "I've been offered a contract for 2 years.",
        "I've been approved for 6 months of paid leave.",
        "She's been sentenced to prison for 5 years.",
        "I've lived in Paris for 2 years before moving here.",
        "I've worked in retail for 5 years, then switched to nursing.",
        "I've studied French for 3 years in high school.",
        "I've been vegan for 3 years and vegetarian for 10 years before that.",
        "I've been thinking that I'd like to study abroad for a year.",
        "I've had a rough week\nwe were together for 2 years.",
        "I could have lived there for 5 years if I'd taken the job.",
        "I would've been playing for 10 years now if I hadn't quit.",
        "Let's run the trial for 3 months.",
    ):
        assert dates_meant(text, later) in ("", "since 2020"), text  # the second: "vegan for 3 years"
    assert dates_meant("I've been vegan for 3 years and vegetarian for 10 years before that.", later) == "since 2020"
    # An older rule is kept: "a couple of years ago" is a date, not a span.
    assert dates_meant("We met a couple of years ago.", later) == "2021"
    # Read again, a resolved phrase is left as it is.
    once = resolve_relative("I've had them for 3 years now.", said)
    assert resolve_relative(once, said) == once


def test_a_weekend_is_dated_only_where_the_day_said_leaves_no_doubt_which():
    friday = datetime(2022, 6, 24, tzinfo=timezone.utc)
    assert dates_meant("I'll make your ice cream for my family this weekend!", friday) == "the weekend of 25 June 2022"
    assert dates_meant("We're hiking next weekend.", friday) == "the weekend of 2 July 2022"
    sunday = datetime(2022, 6, 26, tzinfo=timezone.utc)
    assert dates_meant("I relaxed this weekend.", sunday) == "the weekend of 25 June 2022"
    assert dates_meant("We're hiking next weekend.", sunday) == "the weekend of 2 July 2022"
    wednesday = datetime(2022, 6, 22, tzinfo=timezone.utc)
    assert dates_meant("Any plans this weekend?", wednesday) == "the weekend of 25 June 2022"
    assert dates_meant("We're off this coming weekend.", wednesday) == "the weekend of 25 June 2022"
    monday = datetime(2022, 6, 20, tzinfo=timezone.utc)
    for text, when in (
        ("I relaxed this weekend.", monday),  # the one just gone, or the coming one
        ("I went hiking this weekend.", wednesday),
        ("We're hiking next weekend.", wednesday),  # this coming one, or the one after
        ("the weekend after next weekend", friday),
        ("next weekend after next", friday),
        ("the next weekend we had free", friday),
        # Said midweek of no plan, "this weekend" may be the one just gone (a review, stop 61).
        ("Thanks for this weekend!", wednesday),
        ("Still recovering from this weekend lol", wednesday),
        ("I'm so sore from this weekend's hike.", wednesday),
    ):
        assert dates_meant(text, when) == "", text


def test_a_named_weekday_is_dated_by_next_or_by_the_sentences_tense():
    sunday = datetime(2022, 9, 4, 12, tzinfo=timezone.utc)
    # LoCoMo's "When did James, Samantha and John go to the baseball game together?" is 11 September.
    assert resolve_relative("She and I are going to a baseball game next Sunday, want to join?", sunday) == (
        "She and I are going to a baseball game next Sunday (11 September 2022), want to join?"
    )
    assert dates_meant("I won my fourth video game tournament on Friday! It was awesome.", sunday) == "2 September 2022"
    assert dates_meant("On Friday, I got great news.", sunday) == "2 September 2022"
    assert dates_meant("I had a great accomplishment this Tuesday!", sunday) == "30 August 2022"
    thursday = datetime(2026, 11, 26, 10, tzinfo=timezone.utc)
    # "next Friday" as a task's due date reads it (core.dates): the Friday of next week, not tomorrow.
    # "next Monday" said on a Friday can mean only the coming one, as a task's due date reads it (core.dates);
    # "next Friday" said on a Thursday is tomorrow to some, a week on to others: no date.
    friday = thursday + timedelta(days=1)
    assert dates_meant("I'll call the dentist next Monday.", friday) == "30 November 2026"
    assert dates_meant("I'll call the dentist next Friday.", thursday) == ""
    assert dates_meant("See you next Monday!", thursday + timedelta(days=3)) == ""  # said on a Sunday: tomorrow, or eight days on
    assert dates_meant("We're going to the lake on Saturday.", thursday) == "28 November 2026"
    assert dates_meant("I'm flying out this Monday.", thursday) == "30 November 2026"
    for text, when in (
        ("I'm going on a picnic on Sunday.", sunday),  # said on a Sunday: today, or a week on?
        ("I won it on Sunday.", sunday),
        ("We meet on Friday.", thursday),  # a habit or a plan: no tense says which
        ("I swim on Fridays.", thursday),
        ("I went there and I will go again on Friday.", thursday),  # both tenses
        ("Last week on Friday I ran.", thursday),  # another week
        ("I was born on a Friday in May.", thursday),
        ("We watched Friday the 13th on Friday the 13th.", thursday),
        ("the next Friday I went", thursday),
        ("I was thinking we could go on Friday.", thursday),  # a plan, told in the past tense
        ("I got tickets for the show on Saturday!", thursday),
        ("She said she's coming on Saturday.", thursday),  # reported, of both tenses
    ):
        assert not re.search(r"day \(", resolve_relative(text, when)), text


def test_a_named_weekday_gets_no_date_where_the_sentences_tense_is_not_the_days():
    """A review of edition 9 (about 430 chat sentences) found these dated wrong: the tense read was the
    sentence's, not the day's. Said in the week of Monday 6 November 2023."""
    day = {name: datetime(2023, 11, 6 + i, 15, tzinfo=timezone.utc) for i, name in enumerate(("mon", "tue", "wed", "thu", "fri", "sat", "sun"))}
    for text, when in (
        # A habit: the latest Sunday was given.
        ("When I was a kid, we went to church on Sunday.", "tue"),
        ("Growing up, my dad always made pancakes on Sunday morning.", "tue"),
        ("We used to play cards on Friday nights.", "wed"),
        ("We went dancing on Friday nights.", "wed"),
        # The day of a thing after "from", "after", "about", "for" …: the verb's tense is not the thing's.
        ("My legs are killing me after the hike on Saturday.", "mon"),  # was the coming Saturday
        ("Everything is going great since the surgery on Monday.", "sun"),
        ("The photos from the wedding on Saturday are amazing.", "mon"),
        ("My knee is aching from the match on Thursday.", "sun"),
        ("I'm feeling much better after the rest on Friday.", "sun"),
        ("I found a dress for the wedding on Saturday.", "thu"),  # was the Saturday gone
        ("I'll send you the pics from the party on Friday.", "sun"),
        # Reported or quoted: a past report of a coming day.
        ("She told me the party is on Saturday.", "wed"),
        ("I just found out the exam is on Monday.", "tue"),
        ("He said the package arrives on Monday.", "thu"),
        ("I heard the store opens on Wednesday.", "mon"),
        ("They announced the results come out on Friday.", "wed"),
        ("She reminded me the deadline is this Friday.", "tue"),
        ("Did you know the store is closed on Sunday?", "thu"),
        ('He texted me "see you on Saturday" lol', "thu"),
        ("I read on Monday that the store is closing.", "thu"),  # was the coming Monday
        # A plan told in the past, or changed.
        ("I was hoping to catch up on Friday.", "wed"),
        ("Our flight on Sunday got cancelled.", "fri"),
        ("The game on Saturday was postponed.", "thu"),
        # A past _PAST does not read, beside a present: "broke", "happened"; "I've got" is no past.
        ("My car broke down on Wednesday, so I'm taking the bus on Monday.", "sat"),
        ("I'm going to tell you what happened on Monday.", "fri"),
        ("I've got a date on Friday!", "sun"),
        # "'s" before a noun in -ing is no plan.
        ("My sister's wedding on Saturday, so beautiful!", "mon"),
        ("Mia's painting on Sunday looked stunning.", "wed"),
        # "next" of a day of the past.
        ("That next Friday we went back to the beach.", "wed"),
        ("It was a Tuesday. The following Friday we left. Next Friday was a blur.", "wed"),
    ):
        assert not re.search(r"day \(", resolve_relative(text, day[when])), text
    # The everyday ones keep their dates.
    assert dates_meant("I got back from the trip on Sunday, so tired.", day["mon"]) == "5 November 2023"
    assert dates_meant("Happy Sunday! I went for a run on Saturday.", day["sun"]) == "11 November 2023"
    assert dates_meant("I moved to a new apartment on Saturday.", day["mon"]) == "4 November 2023"
    assert dates_meant("My cousin's wedding was on Saturday!", day["wed"]) == "4 November 2023"
    assert dates_meant("We broke up on Sunday.", day["thu"]) == "5 November 2023"
    assert dates_meant("I'm meeting the client on Monday.", day["thu"]) == "13 November 2023"
    assert dates_meant("She's coming on Thursday!", day["mon"]) == "9 November 2023"
    assert dates_meant("I went to the gym on Monday. I'm going again on Saturday.", day["thu"]) == "6 November 2023 11 November 2023"


def test_wont_is_will_not_not_the_past_of_win():
    """"won't" read as "won": "I won't be there on Friday" said on a Wednesday was dated the Friday
    before, "I won't be there on the 20th" said on the 25th the 20th gone (a review of edition 9)."""
    wednesday = datetime(2023, 11, 8, 15, tzinfo=timezone.utc)
    assert dates_meant("I won't be there on Friday, sorry.", wednesday) == "10 November 2023"
    assert dates_meant("He won\u2019t be home on Saturday.", wednesday) == "11 November 2023"
    assert dates_meant("We won't have time on Sunday.", wednesday) == "12 November 2023"
    assert dates_meant("I won't make it this Thursday.", wednesday - timedelta(days=2)) == "9 November 2023"
    assert dates_meant("I won't be there on the 20th.", datetime(2023, 11, 25, 9, tzinfo=timezone.utc)) == ""
    assert dates_meant("I won't be there on the 20th.", datetime(2023, 11, 11, 9, tzinfo=timezone.utc)) == "20 November 2023"
    assert dates_meant("We won on Sunday!", wednesday) == "5 November 2023"


def test_a_phrase_in_a_long_run_on_text_reads_only_a_bounded_stretch_around_it():
    """A review timed 100,000 characters of "for 2 years " at 34 s: each phrase read its whole
    sentence, there the whole text, so the time grew with the square of the length. A phrase now
    reads at most a fixed stretch either side, and is read the same way."""
    from core import past_dates

    text = "so I've been gardening for 3 years and on the 5th we met " * 300  # ~17,000 characters, no sentence end
    seen: list[int] = []
    real = past_dates._sentence
    try:
        past_dates._sentence = lambda m: (seen.append(len(real(m))), real(m))[1]
        meant = dates_meant(text, datetime(2023, 9, 13, tzinfo=timezone.utc))
    finally:
        past_dates._sentence = real
    assert seen and max(seen) <= 2 * past_dates._SENTENCE_REACH + 40
    assert meant.split(" ")[:2] == ["since", "2020"]


def test_the_last_month_as_the_past_month_gets_no_calendar_month():
    """"So much has happened in the last month" is the thirty days before, not April 2023 (LoCoMo's
    conv-43); no date beats a wrong one. "The last week of April" is no week before either."""
    for text in ("So much has happened in the last month.", "during the last week of April", "over the last year", "in the next week or so", "The\nlast  night of the trip"):
        assert resolve_relative(text, SAID) == text
        assert dates_meant(text, SAID) == ""
    # a word ending in "the" is not "the"
    assert dates_meant("I couldn't breathe last night", SAID) == "7 May 2023"
    assert dates_meant("We had to bathe last week", SAID) == "the week before 8 May 2023"


def test_a_question_about_the_last_month_searches_the_thirty_days_before_not_the_calendar_month():
    now = datetime(2023, 5, 8, 12, tzinfo=timezone.utc)
    since, until = question_range("What happened in the last month?", now)
    assert (since.date().isoformat(), until.date().isoformat()) == ("2023-04-08", "2023-05-09")
    since, until = question_range("What did I do in the last week of April?", now)
    assert (since.date().isoformat(), until.date().isoformat()) == ("2023-04-01", "2023-05-01")
    since, _ = question_range("What did I do last month?", now)
    assert since.date().isoformat() == "2023-04-01"


def test_a_phrase_already_resolved_or_inside_a_word_is_left_as_it_is():
    once = resolve_relative("yesterday", SAID)
    assert resolve_relative(once, SAID) == once
    assert resolve_relative("yesterdays news", SAID) == "yesterdays news"


def test_a_date_goes_after_a_possessive_not_inside_the_word():
    """"Yesterday's game" read "Yesterday (7 May 2023)'s game"; the date now follows the whole word,
    once, however often the text is read ("tomorrow's" said for "tomorrow is" alike)."""
    said = datetime(2023, 5, 8, 12, tzinfo=timezone.utc)
    assert resolve_relative("Yesterday's game was long.", said) == "Yesterday's (7 May 2023) game was long."
    assert resolve_relative("We gave it our all during last week\u2019s scrimmage.", said) == (
        "We gave it our all during last week\u2019s (the week before 8 May 2023) scrimmage."
    )
    assert resolve_relative("Tomorrow's gonna be a blast", said) == "Tomorrow's (9 May 2023) gonna be a blast"
    once = resolve_relative("yesterday's game and yesterday", said)
    assert once == "yesterday's (7 May 2023) game and yesterday (7 May 2023)"
    assert resolve_relative(once, said) == once
    assert dates_meant("Yesterday's game", said) == "7 May 2023"


def test_a_day_the_month_does_not_have_gets_no_date_and_no_error():
    """"I'll see you on the 29th", said on 10 February 2023, raised "day is out of range for month"
    from both functions, so the message could not be indexed (a review, stop 61)."""
    february, april = datetime(2023, 2, 10, 12, tzinfo=timezone.utc), datetime(2023, 4, 10, 12, tzinfo=timezone.utc)
    for text, said in (("I'll see you on the 29th.", february), ("I'm flying out on the 30th!", february), ("I'm leaving on the 31st!", april)):
        assert resolve_relative(text, said) == text
        assert dates_meant(text, said) == ""
    assert dates_meant("I'm flying out on the 28th!", february) == "28 February 2023"


def test_a_rule_that_fails_on_a_text_gives_no_date_not_an_error(monkeypatch, caplog):
    """The dates are an aid: a rule's fault must not stop a message being written or shown."""
    import core.past_dates as past_dates

    def broken(m, said):
        raise ValueError("a rule's fault")

    monkeypatch.setattr(past_dates, "_resolved", broken)
    assert resolve_relative("I saw her yesterday.", SAID) == "I saw her yesterday."
    assert dates_meant("I saw her yesterday.", SAID) == ""
    assert "No date read for 'yesterday'" in caplog.text


def test_a_question_asked_at_the_calendars_edge_gets_no_span_not_an_error():
    """A message's time is its sender's: "in December" asked on 31 December 9999 (its span ends in
    year 10000) or "since May" at a client's zero time 0001-01-01 raised, and load_context with it."""
    last_day, zero_time = datetime(9999, 12, 31, 23, tzinfo=timezone.utc), datetime(1, 1, 1, tzinfo=timezone.utc)
    for question in ("What did I do in December?", "What happened this month?", "Since May?", "What did I do last summer?", "And yesterday?"):
        for now in (last_day, zero_time):
            found = question_range(question, now)
            assert found is None or found[0] < found[1]
    assert question_range("What did I do in December?", last_day) is None
    assert question_range("Since May?", zero_time) is None
    assert question_range("What did I do last summer?", last_day) == (datetime(9999, 6, 1, tzinfo=timezone.utc), datetime(9999, 9, 1, tzinfo=timezone.utc))


def test_a_line_said_at_the_calendars_edge_gets_no_date_outside_it():
    """"I moved 2 years ago" said in year 1 (a sender's clock) read "(-1)"; "next year" on 30
    December 9999 read "(10000)"."""
    text = "I've had them for 3 years now. I moved 2 years ago. Last year was odd, next year too, next month."
    early, late = datetime(1, 3, 1, tzinfo=timezone.utc), datetime(9999, 12, 30, tzinfo=timezone.utc)
    assert resolve_relative(text, early) == text.replace("next year", "next year (2)").replace("next month", "next month (April 1)")
    assert resolve_relative(text, late) == text.replace("now.", "now (since 9996).").replace("ago.", "ago (9997).").replace("Last year", "Last year (9998)")
    assert dates_meant(text, early) == "2 April 1"


def test_a_count_that_is_part_of_a_larger_or_vaguer_number_gets_no_date():
    """"twenty-two years ago" read 2021, "3 years and 2 months ago" March 2023 (a review, stop 61)."""
    assert dated(
        "We moved twenty-two years ago.",
        "We moved twenty two years ago.",
        "We met 3 or 4 years ago.",
        "That was 1.5 years ago.",
        "like 5-10 years ago",
        "3 years and 2 months ago we moved.",
        "Two weeks and a day ago I started.",
    ) == []
    assert dates_meant("We moved 22 years ago.", SAID) == "2001"
    assert dates_meant("I graduated and 2 years ago I moved.", SAID) == "2021"


def test_a_phrase_inside_a_larger_time_gets_no_date():
    """"A week from tomorrow" is not tomorrow, nor "the week before Christmas" the week before it was said."""
    assert dated(
        "A week from tomorrow we fly.",
        "We leave the week after next week.",
        "The year before last year we were in Rome.",
        "Two days before yesterday I got sick.",
        "I was so stressed the week before Christmas.",
        "We saw them the week before last.",
        "My exams were in June, and the week before I barely slept.",
    ) == []
    assert dates_meant("I was sick the week before, but I'm fine now.", SAID) == "the week before 8 May 2023"


def test_last_as_final_an_idiom_or_a_title_gets_no_date():
    assert dated(
        "It was our last night in Rome.",
        "This is my last year teaching.",
        "Every last Friday of the month we do a potluck.",
        "The very last night of the trip was the best.",
        "That's so last year.",
        "I wasn't born yesterday.",
        "He eats like there's no tomorrow.",
        "Tomorrow is another day.",
        "Have you seen The Day After Tomorrow?",
        "Have you heard Last Night by Morgan Wallen?",
        "I Know What You Did Last Summer scared me.",
    ) == []
    assert dates_meant("Yesterday I went to a support group.", SAID) == "7 May 2023"
    assert dates_meant("Caroline: Yesterday I went to a support group.", SAID) == "7 May 2023"


def test_the_guards_leave_the_everyday_phrases_their_dates():
    """A review of the first version of the guards found these lost their dates."""
    said, tuesday, wednesday = SAID, datetime(2023, 11, 22, 12, tzinfo=timezone.utc), datetime(2023, 5, 10, 12, tzinfo=timezone.utc)
    assert dates_meant("I saw her last night at the concert.", said) == "7 May 2023"
    assert dates_meant("Hey Mel\nYesterday I went to the beach!", said) == "7 May 2023"
    assert dates_meant("omg Yesterday was wild", said) == "7 May 2023"
    assert dates_meant("I ran into Tom the other day, what a day!", tuesday) == "a few days before 22 November 2023"
    assert dates_meant("The other day I went to the Sunday market", tuesday) == "a few days before 22 November 2023"
    assert dates_meant("My birthday party was on the 5th.", tuesday) == "5 November 2023"
    assert dates_meant("This weekend is the festival.", wednesday) == "the weekend of 13 May 2023"


def test_a_date_never_breaks_a_hyphenated_word():
    said = datetime(2023, 11, 22, 12, tzinfo=timezone.utc)
    for text in ("We did two day trips; the other day-trip was to Bath.", "Do these plants last year-round?", "Last night-shift was long"):
        assert resolve_relative(text, said) == text


def test_on_the_15th_in_a_sentence_naming_another_time_gets_no_date():
    """"Last year we met on the 5th" read "(5 August 2023)" beside "last year (2022)"."""
    said = datetime(2023, 8, 20, 12, tzinfo=timezone.utc)
    for text in ("I was born on the 3rd.", "Last year we met on the 5th.", "Our son was born 2 years ago, on the 3rd.", "In 2019 we met on the 5th."):
        assert "August" not in dates_meant(text, said), text


def test_a_span_given_by_someone_else_that_may_lie_ahead_is_not_dated_from_now():
    """"The launch has been postponed for a year" does not mean since 2022."""
    for text in ("The launch has been postponed for a year.", "He's been jailed for 5 years.", "I've been transferred to Berlin for 2 years.",
                 "It's been put on hold for 3 months."):
        assert dates_meant(text, SAID) == "", text
    assert dates_meant("I've been married for 5 years", SAID) == "since 2018"


def test_a_recalled_turn_in_the_prompt_carries_the_date_its_relative_words_meant():
    excerpt = {"thread_id": "t1", "chat_title": "Chat", "lines": [
        {"message_id": "m1", "position": 3, "role": "user", "sent_at": SAID.isoformat(), "text": "Caroline: I went to the LGBTQ support group yesterday."}]}
    built = build_prompt(persona_text="You help.", loaded_context={"excerpts": [excerpt]}, summary_text="", knowledge=[], recent=[],
                         current=HumanMessage("When did Caroline go to the support group?"))
    assert "yesterday (7 May 2023)" in parse_sections(built.messages)[EPISODES_HEADER]


ASKED = datetime(2023, 10, 20, tzinfo=timezone.utc)


def _span(question):
    found = question_range(question, ASKED)
    return None if found is None else tuple(d.date().isoformat() for d in found)


def test_a_month_without_a_year_is_its_latest_one_before_the_question():
    assert _span("What did Melanie paint in May?") == ("2023-05-01", "2023-06-01")
    assert _span("What did she do in November?") == ("2022-11-01", "2022-12-01")
    assert _span("Where did they travel in June 2022?") == ("2022-06-01", "2022-07-01")


def test_years_seasons_and_recent_spans_are_the_spans_they_name():
    assert _span("What did Caroline do in 2022?") == ("2022-01-01", "2023-01-01")
    assert _span("What did he do last spring?") == ("2023-03-01", "2023-06-01")
    assert _span("What happened in the summer of 2022?") == ("2022-06-01", "2022-09-01")
    assert _span("What did we talk about last week?") == ("2023-10-09", "2023-10-16")
    assert _span("What did I say yesterday?") == ("2023-10-19", "2023-10-20")
    assert _span("What did I say last month?") == ("2023-09-01", "2023-10-01")


def test_a_question_naming_no_time_has_no_span():
    assert _span("When did Caroline go to the LGBTQ support group?") is None
    assert _span("What is Melanie's favourite book?") is None


def test_a_named_day_is_searched_on_that_day_and_a_day_without_a_year_is_its_latest_one():
    assert _span("What painting did Melanie show to Caroline on October 13, 2023?") == ("2023-10-13", "2023-10-14")
    assert _span("What book did Tim just finish reading on 8th December, 2022?") == ("2022-12-08", "2022-12-09")
    assert _span("Where was the forest picture shared by John on December 1,2022 taken?") == ("2022-12-01", "2022-12-02")
    assert _span("What did I tell you on the 3rd of July?") == ("2023-07-03", "2023-07-04")
    assert _span("What did I say on December 25?") == ("2022-12-25", "2022-12-26")  # after the question: last year's
    assert _span("What did we plan on 30 February?") is None


def test_a_span_reaching_from_a_named_day_keeps_the_day_it_was_said_on():
    assert _span("Where was Tim in the week before 16 November 2022?") == ("2022-11-09", "2022-11-17")
    assert _span("What did Maria do last weekend before April 10, 2023?") == ("2023-04-03", "2023-04-11")  # not the week before the question
    assert _span("What puppy did she get two weeks before August 11, 2023?") == ("2023-07-28", "2023-08-12")
    assert _span("What did they do on the Monday before July 24, 2023?") == ("2023-07-17", "2023-07-25")
    assert _span("What did they plan for the Saturday after October 28, 2022?") == ("2022-10-28", "2022-11-05")
    assert _span("Where was John between August 11 and August 15 2023?") == ("2023-08-11", "2023-08-16")


def test_the_dates_a_message_meant_are_given_alone_in_order_for_its_search_words():
    assert dates_meant("I went yesterday, and last year too; last Saturday was fun.", SAID) == "7 May 2023 2022 6 May 2023"
    assert dates_meant("Nothing dated here.", SAID) == ""


def test_every_phrase_that_resolves_matches_the_hint_a_database_finds_rows_by():
    phrases = [
        "yesterday", "last night", "the day before yesterday", "tomorrow", "last week", "the week before", "the other week",
        "last weekend", "next week", "next month", "last month", "last year", "next year", "this year", "this month",
        "last Friday", "last spring", "two days ago", "3 weeks ago", "a few months ago", "a year ago", "on the 5th",
        "last Fri", "this past weekend", "two weekends ago", "the other day",
    ]
    for phrase in phrases:
        text = f"We spoke {phrase}."
        assert dates_meant(text, SAID), phrase
        assert re.search(RELATIVE_HINT, text.upper(), re.I), phrase
    for text, when in (
        ("We're off this weekend.", SAID + timedelta(days=4)),
        ("We're off next weekend.", SAID + timedelta(days=4)),
        ("I've had it for two years now.", SAID),
        ("Three months now.", SAID),
        ("See you next Friday.", SAID + timedelta(days=5)),  # said on a Saturday
        ("I won it on Friday.", SAID + timedelta(days=2)),
        ("I'm flying out this Friday.", SAID - timedelta(days=2)),
    ):
        assert dates_meant(text, when) and re.search(RELATIVE_HINT, text.upper(), re.I), text
    # Python's case folding reads "ſ" as "s"; Postgres' ~* does not: neither resolves it.
    assert dates_meant("Yeſterday I biked.", SAID) == ""


def test_the_dates_meant_are_utc_days_whatever_zone_the_time_comes_in():
    from zoneinfo import ZoneInfo

    # 03:00 UTC on 8 May is 20:00 on 7 May in Los Angeles: a row read back in that session's zone.
    said = datetime(2023, 5, 8, 3, tzinfo=timezone.utc)
    assert dates_meant("Yesterday I biked.", said) == "7 May 2023"
    assert dates_meant("Yesterday I biked.", said.astimezone(ZoneInfo("America/Los_Angeles"))) == "7 May 2023"


FRIDAY = datetime(2023, 10, 20, 12, tzinfo=timezone.utc)


def days(found):
    return found and tuple(d.date().isoformat() for d in found)


def test_a_question_about_what_is_to_come_gets_no_span_from_a_month_or_season_without_a_year():
    """"What am I doing in November?" searched November 2022, and a past span also lets a message said
    in it through the gate (a review, stop 61)."""
    for question in (
        "What am I doing in November?",
        "What do I have planned for December 25?",
        "Remind me what I need to do on October 25",
        "What will I do in June?",
    ):
        assert question_range(question, FRIDAY) is None, question
    assert question_range("What are my plans this summer?", datetime(2023, 5, 8, tzinfo=timezone.utc)) is None
    assert question_range("What are my plans for this winter?", FRIDAY) is None
    assert days(question_range("What did I do this summer?", FRIDAY)) == ("2023-06-01", "2023-09-01")
    assert days(question_range("What event is Nate organizing in June 2022?", FRIDAY)) == ("2022-06-01", "2022-07-01")


def test_a_question_telling_of_the_past_keeps_its_span_whatever_words_of_plans_it_holds():
    """A review of the first version found these read as questions about what is to come."""
    for question in (
        "What did I have to do in May?",
        "What should I have done in May?",
        "Remind me what I did in May?",
        "What did we decide in May about the upcoming move?",
        "What is something Caroline did in May?",
        "What is everything I told you in May?",
    ):
        assert days(question_range(question, FRIDAY)) == ("2023-05-01", "2023-06-01"), question
    assert days(question_range("What trip did I plan last summer?", FRIDAY)) == ("2023-06-01", "2023-09-01")
    assert days(question_range("What did I tell her last week?", FRIDAY)) == ("2023-10-09", "2023-10-16")
    assert days(question_range("On 8 August we went to the zoo, what did we see?", FRIDAY)) == ("2023-08-08", "2023-08-09")
    assert days(question_range("On 8 May we went hiking; where did we go?", FRIDAY)) == ("2023-05-08", "2023-05-09")
    assert names_a_date("On 8 August we went to the zoo, what did we see?") and names_a_date("What did I do August 11-15?")


def test_a_month_day_or_season_beside_another_year_is_read_in_it_or_not_at_all():
    assert days(question_range("What did I do in May of 2021?", FRIDAY)) == ("2021-05-01", "2021-06-01")
    assert days(question_range("What did I do on May 3 of 2021?", FRIDAY)) == ("2021-05-03", "2021-05-04")
    assert days(question_range("What did I do in summer 2021?", FRIDAY)) == ("2021-06-01", "2021-09-01")
    assert days(question_range("What did I do during spring 2022?", FRIDAY)) == ("2022-03-01", "2022-06-01")
    for question in (
        "In 2021, what did I do in May?",  # this year's May was searched
        "What did I do on May 3 last year?",
        "What did I do in May 2 years ago?",  # the day 2 May
        "What did I do in the summer two years ago?",
    ):
        assert question_range(question, FRIDAY) is None, question


def test_a_count_a_name_or_a_verb_is_not_a_day_or_a_month():
    for question in ("Which of the 2 may be better for me?", "May 2 people share one ticket?", "What is the name of June's husband?",
                     "What's the name of April's dog?", "What were the top 10 May releases?"):
        assert question_range(question, FRIDAY) is None, question
        assert not names_a_date(question), question


def test_a_phrase_inside_a_larger_time_an_idiom_or_a_title_gets_no_span():
    for question in (
        "What did I do the day before yesterday?",
        "What did I do the week before last week?",
        "What was I doing before last year?",
        "Who hosts Last Week Tonight?",
        "Did I like I Know What You Did Last Summer?",
        "Why did I say crocs are so last year?",
    ):
        assert question_range(question, FRIDAY) is None, question


def test_last_as_final_gets_no_span_but_in_the_last_month_is_the_thirty_days_before():
    for question in ("What was my last week at the old job like?", "When was the last year we went to Paris?",
                     "Tell me about my last summer in Spain", "When was the last winter we went skiing?"):
        assert question_range(question, FRIDAY) is None, question
    assert days(question_range("What did I do last week of April?", FRIDAY)) == ("2023-04-01", "2023-05-01")
    assert days(question_range("What happened in the last month?", FRIDAY)) == ("2023-09-20", "2023-10-21")


def test_since_a_time_reaches_to_now():
    assert days(question_range("What have I done since May?", FRIDAY)) == ("2023-05-01", "2023-10-21")
    assert days(question_range("What have I been doing since last month?", FRIDAY)) == ("2023-09-01", "2023-10-21")
    assert days(question_range("What did I do since May 5?", FRIDAY)) == ("2023-05-05", "2023-10-21")


def test_two_days_of_a_month_span_both_and_a_year_written_once_serves_both_ends():
    """"between 11 and 15 August" searched the 15th alone; "from March 1 to March 5, 2022" the 1st of 2023."""
    assert days(question_range("Where was I between 11 and 15 August?", FRIDAY)) == ("2023-08-11", "2023-08-16")
    assert days(question_range("Where was I on August 11-15?", FRIDAY)) == ("2023-08-11", "2023-08-16")
    assert days(question_range("What did I do between May 2 and 5?", FRIDAY)) == ("2023-05-02", "2023-05-06")
    assert days(question_range("What did I do from March 1 to March 5, 2022?", FRIDAY)) == ("2022-03-01", "2022-03-06")
    assert days(question_range("What did I do from August 11 to 15, 2022?", FRIDAY)) == ("2022-08-11", "2022-08-16")
    # A year on one end only serves the other, across a new year too (it read over a year).
    january = datetime(2024, 1, 10, tzinfo=timezone.utc)
    assert days(question_range("Where was I between December 28, 2022 and January 3?", january)) == ("2022-12-28", "2023-01-04")
    assert days(question_range("What happened between December 28 and January 3, 2023?", january)) == ("2022-12-28", "2023-01-04")
    assert days(question_range("Where was I between March 1 and March 5, 2022?", FRIDAY)) == ("2022-03-01", "2022-03-06")
    # Days given the wrong way round get no span, whichever end holds the year (one read a year long).
    assert question_range("Where was I between March 15, 2022 and March 10?", FRIDAY) is None
    assert question_range("Where was I between March 15 and March 10, 2022?", FRIDAY) is None
    # Two days named with "and" are two days, not the month between them.
    assert days(question_range("Where was I on August 1 and 30?", FRIDAY)) == ("2023-08-01", "2023-08-02")
    assert question_range("Do you think 3 to 5 may be enough?", FRIDAY) is None
    # "since" a time yet to come: no span (it ran backwards).
    assert question_range("What have I done since May 2024?", datetime(2024, 1, 3, tzinfo=timezone.utc)) is None


def test_a_question_names_a_date_only_with_a_day_a_month_or_a_year():
    assert names_a_date("Where was Tim in the week before 16 November 2023?")
    assert names_a_date("How long has it been, as of November 2023?")
    assert names_a_date("What did John organize in 2024?")
    assert not names_a_date("I may have told you about my knee")
    assert not names_a_date("When did Caroline go to the support group?")
