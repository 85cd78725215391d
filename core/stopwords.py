"""The one stopword list, and the few named word sets each matcher adds to it.

Every keyword matcher (chat history search, finding a chat by topic, the knowledge base's
full-text query, the offline model's rules and extractive summaries, the evals' lexical
recall) takes its words from here; tests/unit/test_one_home.py fails when a module
defines a list of its own.
"""

from __future__ import annotations

ENGLISH = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before being
    below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down
    during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here
    here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
    let's me more most mustn't my myself no nor not of off on once only or other ought our ours ourselves
    out over own mine same shan't she she'd she'll she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this those through
    to too under until up us very was wasn't we we'd we'll we're we've were weren't what what's when when's
    where where's which while who who's whom why why's will with won't would wouldn't you you'd you'll
    you're you've your yours yourself yourselves
    """.split()
)
ITALIAN = frozenset(
    """
    il lo la i gli le un uno una di da del della dei delle dello degli in con su per tra fra e ed o che chi
    come dove quando perché non è sono sei siamo si ci mi ti vi al allo alla ai agli alle nel nella nei nelle
    nello sul sulla dal dalla questo questa questi queste quello quella anche molto più però io tu lui lei
    noi voi loro mio mia miei mie tuo tua suoi sue
    """.split()
)
HEBREW = frozenset("של את זה זאת אני אתה הוא היא אנחנו הם לי לך לו לה גם עם על מה איך יש אין אבל רק כל".split())

STOPWORDS: frozenset[str] = ENGLISH | ITALIAN | HEBREW
"""Function words of the languages the agent is used in: no evidence of what a text is about."""

FILLER = frozenset(
    "hi hello hey thanks thank ok okay yes yeah yep nope bye goodbye please sure cool great lol "
    "ciao grazie prego sì salve שלום תודה כן לא".split()
)
"""Greetings and acknowledgements: a message made of these asks nothing."""

VAGUE = frozenset(
    "just really also too some any all more most much many few lot bit please now still already again ever "
    "never here there maybe perhaps yet well done".split()
)
"""Degree words and adverbs that never start a name, a role or a possession."""

CHAT_WORDS = frozenset("chat conversation one about again back go talk talked discussed said asked".split())
"""How people refer to a conversation ("the chat where we talked about ..."), not its topic."""

LOW_CONTENT = frozenset(
    """
    like want wants need needs know think said says tell told make made get got going go goes gone
    thing things something anything nothing everything someone anyone one two
    today tomorrow yesterday tonight week weeks month year years day days time times good great nice
    remind todo let can could would should might must shall may answer answers question questions
    offline model extractive called user assistant
    name names live lives living lived work works working worked call calls calling called love loves
    loved likes liked help note start use using used right first last next other another new old little
    big best better way ways kind sort lots plan planning planned try trying tried look looking looks
    feel feels find found give gave keep kept come came take took put see saw seen ask asked says
    talk talked talking discuss discussed discussing chat chatted chatting conversation went said
    essere avere fare ancora tutto tutti cosa voglio vorrei posso puoi
    """.split()
)
"""Words too common in chat to say what a sentence is about (the offline summary's scoring)."""


FULL_TEXT_STOP_LEXEMES = frozenset(
    """
    il lo la gli le un uno una di da del della dei delle con su
    per tra fra ed che chi come dove quando perché non è sono si ci mi
    ti vi al allo alla ai agli alle nel nella nei nelle hi hello hey thank
    thanks ok okay yes yeah yep nope bye goodbye pleas sure cool great lol ciao grazi
    prego sì salv
    """.split()
)
"""Lexemes Postgres's 'english' parser leaves of Italian function words and chat filler ('pleas',
'grazi'): the episodic index's full-text search drops them from a query (storage/episodes.py)."""


def without_apostrophes(words: frozenset[str]) -> frozenset[str]:
    """The words as a tokenizer that drops apostrophes sees them ("don't" -> "dont")."""
    return frozenset(w.replace("'", "") for w in words)
