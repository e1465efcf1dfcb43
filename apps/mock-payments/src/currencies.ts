/**
 * ISO 4217 alphabetic codes a payment or invoice may be made in: List One (current funds and
 * currencies) as of 2026, kept by hand. Left out: XTS (reserved for testing) and XXX (no
 * currency), which name no money, and codes already withdrawn (HRK, SLL, ZWL, CUC, ANG,
 * BGN with Bulgaria's adoption of the euro) so a payment in a dead currency is a 400, not a
 * silent success. Three upper-case letters alone is not enough: "EUX" has the shape of a code.
 */
export const ISO_4217_CURRENCIES: ReadonlySet<string> = new Set(
  (
    "AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BHD BIF BMD BND BOB BOV BRL BSD BTN BWP BYN BZD " +
    "CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP " +
    "GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR " +
    "KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN " +
    "MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD " +
    "SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX " +
    "USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB XBC XBD XCD XCG XDR XOF XPD XPF " +
    "XPT XSU XUA YER ZAR ZMW ZWG"
  ).split(" "),
);

export function isIso4217Currency(code: string): boolean {
  return ISO_4217_CURRENCIES.has(code);
}
